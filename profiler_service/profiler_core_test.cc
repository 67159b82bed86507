#include "profiler_service/profiler_core.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

std::string TempDir(const char* name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string d = std::string(t ? t : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

Task MakeTask() {
  Task t;
  t.set_id("level1/19_ReLU");
  t.set_content_hash("0123456789abcdef0123456789abcdef");
  t.mutable_inputs()->set_device("cuda");
  return t;
}

// A harness measurement JSON: `n` calls around `us` with one candidate kernel.
std::string MeasurementJson(double us, int n) {
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(1.0, 0.002);
  std::string samples;
  for (int i = 0; i < n; ++i) {
    const double t = us * noise(rng);
    if (i) samples += ",";
    samples += "{\"cupti_us\":" + std::to_string(t) + ",\"event_us\":" + std::to_string(t * 1.05) +
               ",\"wall_us\":" + std::to_string(t * 1.05 + 10) + "}";
  }
  return "{\"candidate\":{\"label\":\"candidate\",\"backend\":\"cuda\",\"cupti_active\":true,"
         "\"harness_thread_id\":100,\"harness_stream_ids\":[7],\"samples\":[" + samples +
         "],\"activities\":[{\"name\":\"relu_kernel\",\"kind\":\"kernel\",\"stream_id\":7,"
         "\"thread_id\":100,\"count\":" + std::to_string(n) + ",\"total_us\":" + std::to_string(us * n) +
         "}]},\"candidate_symbols\":[\"relu_kernel\"],\"device\":{\"gpu_model\":\"H100\",\"backend\":\"cuda\","
         "\"l2_bytes\":5e7}}";
}

TEST(ProfilerCore, JudgesTheHarnessMeasurementAgainstTheCachedBaseline) {
  ProfilerConfig config;
  config.set_baseline_cache_dir(TempDir("core_cache"));
  MetricsRegistry metrics;
  ProfilerCore core(config, "H100", "2.11.0+cu130", &metrics);

  // Miss: cache_only reports it missing and never measures.
  v1::BaselinesRequest breq;
  *breq.add_tasks() = MakeTask();
  breq.set_cache_only(true);
  v1::BaselinesResponse bres = core.Baselines(breq);
  EXPECT_EQ(bres.baselines_size(), 0);
  EXPECT_EQ(bres.missing().count("level1/19_ReLU"), 1u);

  // Seed the cache under the key the core derives.
  Baseline b;
  b.set_task_id("level1/19_ReLU");
  b.set_task_hash(MakeTask().content_hash());
  b.set_gpu_model("H100");
  b.set_torch_version("2.11.0+cu130");
  b.set_input_policy_hash("get_inputs-v1.cuda.task");
  b.mutable_eager()->set_median_us(200.0);
  b.mutable_compiled()->set_median_us(180.0);
  ASSERT_TRUE(BaselineCache(config.baseline_cache_dir()).Put(b).ok());
  bres = core.Baselines(breq);
  ASSERT_EQ(bres.baselines_size(), 1);
  EXPECT_DOUBLE_EQ(bres.baselines(0).eager().median_us(), 200.0);

  const std::string artifacts = TempDir("core_artifacts");
  std::ofstream(artifacts + "/profile_measurement.json") << MeasurementJson(100.0, 50);
  v1::ProfileRequest req;
  *req.mutable_task() = MakeTask();
  req.set_artifact_dir(artifacts);
  absl::StatusOr<ProfileResult> r = core.Profile(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict().outcome(), Verdict::OK);
  EXPECT_EQ(r->verdict().reward(), 3.0);
  EXPECT_NEAR(r->verdict().speedup_vs_eager(), 2.0, 0.02);
  EXPECT_NE(metrics.Expose().find("kernelrl_profiler_profiles_total{outcome=\"OK\"} 1"), std::string::npos)
      << metrics.Expose();
}

TEST(ProfilerCore, ProfileWithoutAMeasurementOrHashIsAnError) {
  ProfilerConfig config;
  config.set_baseline_cache_dir(TempDir("core_cache2"));
  MetricsRegistry metrics;
  ProfilerCore core(config, "H100", "2.11.0+cu130", &metrics);
  v1::ProfileRequest req;
  *req.mutable_task() = MakeTask();
  req.set_artifact_dir(TempDir("core_empty"));
  EXPECT_TRUE(absl::IsFailedPrecondition(core.Profile(req).status()));
  std::ofstream(req.artifact_dir() + "/profile_measurement.json") << "{\"candidate\": 3}";
  EXPECT_TRUE(absl::IsInvalidArgument(core.Profile(req).status()));

  v1::BaselinesRequest breq;
  Task t = MakeTask();
  t.clear_content_hash();
  *breq.add_tasks() = t;
  EXPECT_EQ(core.Baselines(breq).missing().at("level1/19_ReLU"), "task has no content_hash");
}

}  // namespace
}  // namespace kernelrl
