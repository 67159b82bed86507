#include "profiler_service/profiler_core.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"
#include "profiler_service/task_key.h"

namespace kernelrl {
namespace {

using ::kernelrl::testing::NewTempDir;

// A task with a fresh random reference source (so its hash is fresh too).
Task RandomTask(std::mt19937& rng) {
  Task t;
  t.set_id("level1/19_ReLU");
  t.set_reference_source("import torch\n# " + std::to_string(rng()) + "\nclass Model(torch.nn.Module): pass\n");
  t.mutable_inputs()->set_device("cuda");
  return t;
}

Baseline CachedBaseline(const BaselineKey& key, double eager_us, double compiled_us) {
  Baseline b;
  b.set_task_id("level1/19_ReLU");
  b.set_task_hash(key.task_hash);
  b.set_gpu_model(key.gpu_model);
  b.set_torch_version(key.torch_version);
  b.set_input_policy_hash(key.input_policy_hash);
  b.mutable_eager()->set_median_us(eager_us);
  b.mutable_compiled()->set_median_us(compiled_us);
  return b;
}

// A harness measurement: `n` calls around `us` with one candidate kernel.
ProfileMeasurement Measurement(double us, int n, std::mt19937& rng) {
  std::normal_distribution<double> noise(1.0, 0.002);
  ProfileMeasurement m;
  RawTimingRun& c = *m.mutable_candidate();
  c.set_label("candidate");
  c.set_backend("cuda");
  c.set_cupti_active(true);
  c.set_harness_thread_id(100);
  c.add_harness_stream_ids(7);
  for (int i = 0; i < n; ++i) {
    const double t = us * noise(rng);
    CallSample& s = *c.add_samples();
    s.set_cupti_us(t);
    s.set_event_us(t * 1.05);
    s.set_wall_us(t * 1.05 + 10);
  }
  KernelActivity& a = *c.add_activities();
  a.set_name("relu_kernel");
  a.set_kind("kernel");
  a.set_stream_id(7);
  a.set_thread_id(100);
  a.set_count(n);
  a.set_total_us(us * n);
  m.add_candidate_symbols("relu_kernel");
  m.mutable_device()->set_gpu_model("H100");
  m.mutable_device()->set_backend("cuda");
  m.mutable_device()->set_l2_bytes(5e7);
  return m;
}

// The profiler serves the baseline under the key the sandbox's profile stage
// reads (BaselineKeyFor, hash recomputed from the source): the request's
// content_hash plays no part, and the served entry judges like the stage does.
TEST(ProfilerCore, ServesTheBaselineTheProfileStageReads) {
  std::mt19937 rng(std::random_device{}());
  ProfilerConfig config;
  config.set_baseline_cache_dir(NewTempDir("core_cache_"));
  MetricsRegistry metrics;
  ProfilerCore core(config, "H100", "2.11.0+cu130", &metrics);
  const Task task = RandomTask(rng);

  // Miss: cache_only reports it missing and never measures.
  v1::BaselinesRequest breq;
  *breq.add_tasks() = task;
  breq.set_cache_only(true);
  v1::BaselinesResponse bres = core.Baselines(breq);
  EXPECT_EQ(bres.baselines_size(), 0);
  EXPECT_EQ(bres.missing().count(task.id()), 1u);

  const double eager_us = 150 + rng() % 100, compiled_us = eager_us * 0.9;
  const BaselineKey key = BaselineKeyFor(task, "cuda", "H100", "2.11.0+cu130");
  ASSERT_TRUE(BaselineCache(config.baseline_cache_dir()).Put(CachedBaseline(key, eager_us, compiled_us)).ok());
  bres = core.Baselines(breq);
  ASSERT_EQ(bres.baselines_size(), 1);
  EXPECT_DOUBLE_EQ(bres.baselines(0).eager().median_us(), eager_us);

  // A forged content_hash in the request does not move the key.
  breq.mutable_tasks(0)->set_content_hash(std::string(64, 'f'));
  ASSERT_EQ(core.Baselines(breq).baselines_size(), 1);
  // Another reference source is another task.
  *breq.mutable_tasks(0) = RandomTask(rng);
  EXPECT_EQ(core.Baselines(breq).baselines_size(), 0);

  // The served baseline through the one judge: half the eager time pays 3.
  const ProfileResult r = JudgeProfile(Measurement(eager_us / 2, 50, rng), &bres.baselines(0), task,
                                       WithProfilerDefaults(config));
  EXPECT_EQ(r.verdict().outcome(), Verdict::OK);
  EXPECT_EQ(r.verdict().reward(), 3.0);
  EXPECT_NEAR(r.verdict().speedup_vs_eager(), 2.0, 0.02);
  EXPECT_NE(metrics.Expose().find("kernelrl_profiler_baseline_lookups_total{result=\"hit\"} 2"),
            std::string::npos)
      << metrics.Expose();
}

// On a miss the core runs the precompute (here a stand-in script that writes
// one BaselineMeasurement line to --out) and caches the entry under the key.
TEST(ProfilerCore, MeasuresAMissAndCachesIt) {
  std::mt19937 rng(std::random_device{}());
  const std::string dir = NewTempDir("core_measure_");
  const double eager_us = 50 + rng() % 50;
  std::string samples;
  for (int i = 0; i < 20; ++i) {
    samples += (i ? "," : "") + std::string("{\"cupti_us\":") + std::to_string(eager_us * (1 + 0.001 * (i % 3))) +
               ",\"event_us\":" + std::to_string(eager_us * 1.05) + ",\"wall_us\":" + std::to_string(eager_us * 2) +
               "}";
  }
  const std::string fake_python = dir + "/fake_python";
  {
    std::ofstream f(fake_python);
    f << "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n"
      << "echo '{\"task_id\":\"x\",\"eager\":{\"label\":\"eager\",\"backend\":\"cuda\",\"cupti_active\":true,"
      << "\"samples\":[" << samples << "]}}' > \"$out\"\n";
  }
  ASSERT_EQ(chmod(fake_python.c_str(), 0755), 0);
  ProfilerConfig config;
  config.set_baseline_cache_dir(dir + "/cache");
  config.set_harness_python(fake_python);
  MetricsRegistry metrics;
  ProfilerCore core(config, "H100", "2.11.0+cu130", &metrics);
  const Task task = RandomTask(rng);
  v1::BaselinesRequest breq;
  *breq.add_tasks() = task;
  v1::BaselinesResponse bres = core.Baselines(breq);
  ASSERT_EQ(bres.baselines_size(), 1) << bres.DebugString();
  EXPECT_NEAR(bres.baselines(0).eager().median_us(), eager_us, eager_us * 0.002);
  const BaselineKey key = BaselineKeyFor(task, "cuda", "H100", "2.11.0+cu130");
  absl::StatusOr<Baseline> cached = BaselineCache(config.baseline_cache_dir()).Get(key);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->task_hash(), key.task_hash);
  breq.set_cache_only(true);
  EXPECT_EQ(core.Baselines(breq).baselines_size(), 1);
}

TEST(ProfilerCore, TaskWithoutSourceIsMissing) {
  std::mt19937 rng(std::random_device{}());
  ProfilerConfig config;
  config.set_baseline_cache_dir(NewTempDir("core_cache2_"));
  MetricsRegistry metrics;
  ProfilerCore core(config, "H100", "2.11.0+cu130", &metrics);
  v1::BaselinesRequest breq;
  Task t = RandomTask(rng);
  t.clear_reference_source();
  *breq.add_tasks() = t;
  EXPECT_EQ(core.Baselines(breq).missing().at(t.id()), "task has no reference_source");
}

}  // namespace
}  // namespace kernelrl
