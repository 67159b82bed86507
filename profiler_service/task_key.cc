#include "profiler_service/task_key.h"

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace kernelrl {
namespace {

std::string DtypeOrTask(const std::string& dtype) { return dtype.empty() ? "task" : dtype; }

}  // namespace

std::string InputPolicyText(const std::string& device, const std::string& dtype) {
  return absl::StrCat("generator=", kInputPolicyVersion, ";device=", device, ";dtype=", DtypeOrTask(dtype));
}

std::string InputPolicyHash(const std::string& device, const std::string& dtype) {
  return absl::StrCat(kInputPolicyVersion, ".", device, ".", DtypeOrTask(dtype));
}

std::string TaskHash(const std::string& reference_source, const std::string& device, const std::string& dtype) {
  std::string blob = reference_source;
  blob.push_back('\0');
  blob += InputPolicyText(device, dtype);
  return Sha256Hex(blob);
}

std::string DeclaredDevice(const Task& task) {
  return task.inputs().device().empty() ? "cuda" : task.inputs().device();
}

std::string ContentHashOf(const Task& task) {
  return TaskHash(task.reference_source(), DeclaredDevice(task), task.inputs().dtype());
}

BaselineKey BaselineKeyFor(const Task& task, const std::string& device, const std::string& gpu_model,
                           const std::string& torch_version, bool tf32) {
  return {TaskHash(task.reference_source(), device, task.inputs().dtype()), gpu_model, torch_version,
          InputPolicyHash(device, task.inputs().dtype()) + (tf32 ? ".tf32" : "")};
}

}  // namespace kernelrl
