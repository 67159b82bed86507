// judge_measurements: runs the C++ judge over harness measurements recorded on
// a device (JSON lines {"case", "library_policy", "expect", "measurement"}, as
// profiler_service/harness/device/checks.py writes them) and prints, per case,
// the outcome, reward, flags and whether every expected flag was raised.
// Exit status 1 when an expected flag is missing or an honest case (no
// expected flags) got a hack or audit flag.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_join.h"
#include "common/log.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/reward.h"

namespace kernelrl {
namespace {

int Run(const char* path) {
  std::ifstream in(path);
  if (!in) {
    KLOG(ERROR) << "judge_measurements: cannot read " << path;
    return 2;
  }
  const ProfilerConfig config = WithProfilerDefaults(ProfilerConfig());
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  int bad = 0;
  std::string line;
  while (std::getline(in, line)) {
    google::protobuf::Struct root;
    if (!google::protobuf::util::JsonStringToMessage(line, &root, opts).ok()) return 2;
    const auto& f = root.fields();
    std::string json;
    ProfileMeasurement m;
    Task task;
    (void)google::protobuf::util::MessageToJsonString(f.at("measurement"), &json);
    if (!google::protobuf::util::JsonStringToMessage(json, &m, opts).ok()) return 2;
    json.clear();
    (void)google::protobuf::util::MessageToJsonString(f.at("library_policy"), &json);
    if (!google::protobuf::util::JsonStringToMessage(json, task.mutable_library_policy(), opts).ok()) return 2;
    const ProfileResult r = JudgeProfile(m, nullptr, task, config);
    const auto& flags = r.verdict().flags();
    std::vector<std::string> missing;
    for (const auto& e : f.at("expect").list_value().values()) {
      if (std::find(flags.begin(), flags.end(), e.string_value()) == flags.end()) {
        missing.push_back(e.string_value());
      }
    }
    bool honest_flagged = false;
    if (f.at("expect").list_value().values_size() == 0) {
      for (const auto& fl : flags) honest_flagged |= SeverityOf(fl) != FlagSeverity::kInfo;
    }
    const bool pass = missing.empty() && !honest_flagged;
    bad += !pass;
    std::cout << (pass ? "PASS " : "FAIL ") << f.at("case").string_value() << "  outcome="
              << Verdict::Outcome_Name(r.verdict().outcome()) << " reward=" << RewardFor(r.verdict())
              << " own=" << r.verdict().coverage().own_kernel_us() << "us/"
              << r.verdict().coverage().total_gpu_us() << "us flags=[" << absl::StrJoin(flags, ",") << "]"
              << (missing.empty() ? "" : " missing=[" + absl::StrJoin(missing, ",") + "]") << "\n";
  }
  return bad ? 1 : 0;
}

}  // namespace
}  // namespace kernelrl

int main(int argc, char** argv) {
  if (argc != 2) {
    KLOG(ERROR) << "usage: judge_measurements EXPLOITS.jsonl";
    return 2;
  }
  return kernelrl::Run(argv[1]);
}
