// ParseDiagnostics: compiler output (nvcc, cudafe, ptxas, g++, ld) into
// structured CompileDiagnostic records (file relative to the workspace, line,
// column, severity, message), capped in count and message length so a
// candidate cannot flood the verdict.
#ifndef KERNELRL_SANDBOX_DIAGNOSTICS_H_
#define KERNELRL_SANDBOX_DIAGNOSTICS_H_

#include <string>
#include <vector>

#include "sandbox/proto_types.h"
#include "proto/verdict.pb.h"

namespace kernelrl::sandbox {

std::vector<CompileDiagnostic> ParseDiagnostics(const std::string& output, const std::string& workspace_dir,
                                                int max_diagnostics, int max_message_chars);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_DIAGNOSTICS_H_
