// The kernelrl.v1 proto types the profiler uses, named in namespace kernelrl.
#ifndef KERNELRL_PROFILER_SERVICE_PROTO_TYPES_H_
#define KERNELRL_PROFILER_SERVICE_PROTO_TYPES_H_

#include "proto/profiler.pb.h"
#include "proto/profiler_config.pb.h"
#include "proto/task.pb.h"
#include "proto/verdict.pb.h"

namespace kernelrl {
using v1::Baseline;
using v1::BaselineMeasurement;
using v1::CallSample;
using v1::CopyRates;
using v1::DeviceInfo;
using v1::KernelActivity;
using v1::KernelCoverage;
using v1::KernelRecord;
using v1::LibraryPolicy;
using v1::ProfileMeasurement;
using v1::ProfileResult;
using v1::ProfilerConfig;
using v1::RawTimingRun;
using v1::SpeedUpBasis;
using v1::Task;
using v1::TimingStats;
using v1::Verdict;
using v1::WorkEstimate;
}  // namespace kernelrl

#endif  // KERNELRL_PROFILER_SERVICE_PROTO_TYPES_H_
