#include "learner/bench/kernel_profile.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace kernelrl::learner::bench {

void PrintKernelProfile(const std::function<void()>& step, int steps, const std::string& header, int rows) {
  namespace prof = torch::profiler::impl;
  auto sync = [] {
    if (at::hasCUDA()) c10::cuda::device_synchronize();
  };
  sync();
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities = {prof::ActivityType::CPU, prof::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  for (int i = 0; i < steps; ++i) step();
  sync();
  auto result = torch::autograd::profiler::disableProfiler();
  std::map<std::string, std::pair<double, int>> by_name;  // ms, count
  double total_ms = 0;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const double ms = e.durationNs() / 1e6 / steps;
    auto& slot = by_name[e.name()];
    slot.first += ms;
    slot.second += 1;
    total_ms += ms;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> table(by_name.begin(), by_name.end());
  std::sort(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf("{%s, \"gpu_ms_per_step\": %.3f}\n", header.c_str(), total_ms);  // 0 on the CPU.
  for (size_t i = 0; i < table.size() && i < static_cast<size_t>(rows); ++i) {
    std::string name = table[i].first.substr(0, 110);
    std::replace(name.begin(), name.end(), '"', '\'');
    std::printf("{\"kernel\": \"%s\", \"ms_per_step\": %.3f, \"share\": %.3f, \"calls_per_step\": %d}\n", name.c_str(),
                table[i].second.first, table[i].second.first / total_ms, table[i].second.second / steps);
  }
  std::fflush(stdout);
}

}  // namespace kernelrl::learner::bench
