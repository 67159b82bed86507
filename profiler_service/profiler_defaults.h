// Defaults of ProfilerConfig: every zero/empty field of the user's config is
// replaced by the documented default (proto/profiler_config.proto), so the
// rest of the profiler reads plain values and never re-checks for zero.
#ifndef KERNELRL_PROFILER_SERVICE_PROFILER_DEFAULTS_H_
#define KERNELRL_PROFILER_SERVICE_PROFILER_DEFAULTS_H_

#include "profiler_service/proto_types.h"

namespace kernelrl {

ProfilerConfig WithProfilerDefaults(ProfilerConfig config);

}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_PROFILER_DEFAULTS_H_
