// verify -> profile -> judge -> reward, end to end on the CPU backend (the
// profiler's wall-clock backend), against a baseline this test measures itself
// through the candidate path (//sandbox:measure_baselines: the task's Model and
// torch.compile(Model) in the executor, timed by the reference process; then
// the precompute_baselines importer) into a fresh cache:
//  * the baseline carries the executor path's marks (trusted blocks, every
//    forward compared, the anchor, timing_path);
//  * an honest solution earns MilestoneReward of its measured speed-ups;
//  * an honest solution ~50x slower than eager earns exactly 1;
//  * exploits still earn -1, including one that is only wrong after verify
//    (caught by the reference process re-checking timed calls);
//  * a task without a baseline is "correct, not benchmarked": reward 1; so is
//    one whose baseline was not timed through the executor path;
//  * the C++ task key and the Python one (harness/tasks.py) agree.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/file.h"
#include "common/gpu_lease.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "profiler_service/baseline_cache.h"
#include "profiler_service/judge.h"
#include "profiler_service/reward.h"
#include "profiler_service/task_key.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::sandbox {
namespace {

using testing::Cwd;

constexpr char kRelu[] = "sandbox/testdata/cpu_tasks/relu.py";
constexpr char kNondeterministic[] = "sandbox/tests/testdata/baseline_nondeterministic.py";
constexpr double kFlushMultiple = 0.125;  // of the LLC: a few MB per flush on CI machines

std::string Shell(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen((cmd + " 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    if (rc != 0) out = "EXIT " + std::to_string(rc) + ": " + out;
  }
  return out;
}

bool HasFlag(const Verdict& v, const std::string& f) {
  for (const auto& x : v.flags()) {
    if (x == f) return true;
  }
  return false;
}

bool HasStage(const Verdict& v, const std::string& s) {
  for (const auto& x : v.stages()) {
    if (x.stage() == s) return true;
  }
  return false;
}

std::string Describe(const Verdict& v) {
  std::string s = Verdict::Outcome_Name(v.outcome()) + " reward=" + std::to_string(v.reward()) + " " + v.summary();
  for (const auto& f : v.flags()) s += " [" + f + "]";
  if (v.logs().count("profile")) s += "\n" + v.logs().at("profile");
  if (v.logs().count("candidate")) s += "\ncandidate log:\n" + v.logs().at("candidate").substr(0, 3000);
  return s;
}

class ProfileCpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    python_ = new std::string(testing::FindTorchPython());
    if (python_->empty()) return;
    root_ = new std::string(::kernelrl::testing::NewTempDir("profile-e2e-"));
    const std::string tasks = *root_ + "/tasks/level1";
    ASSERT_EQ(std::system(("mkdir -p " + tasks + " && cp " + kRelu + " " + tasks + "/relu.py && cp " +
                           kNondeterministic + " " + tasks + "/nondeterministic.py").c_str()),
              0);
    SandboxConfig c = testing::CpuConfig(*python_);
    c.set_enable_profiling(true);
    c.set_baseline_dir(*root_ + "/baselines");
    c.set_gpu_lease_path(*root_ + "/gpu.lease");
    c.mutable_verify()->set_wall_seconds(60);
    v1::ProfilerConfig& p = *c.mutable_profiler();
    // Every expectation here holds at any sample count past min_samples: a
    // short budget keeps the 15 slow trust-boundary exploits from running it out.
    p.set_time_budget_s(1.5);
    p.set_min_samples(10);
    p.set_max_samples(200);
    p.set_target_rel_std_error(0.02);
    p.set_warmup_calls(2);
    p.set_l2_flush_multiple(kFlushMultiple);
    p.set_block_target_us(1000);
    // The CPU drift anchor (a 64 MB copy) swings several-fold while the suite
    // loads these 2 cores; a drifted device is declined (INFRA_ERROR), which
    // judge_test covers. Here the timing path is under test, so it is off.
    p.set_anchor_drift_tolerance(1e9);
    // The baseline: eager and torch.compile timed through the executor path
    // by a worker configured like this one (its own work root), then imported
    // into the cache.
    SandboxConfig bc = c;
    bc.set_work_root(c.work_root() + "-baselines");
    // Baselines keep a longer budget than the candidates here: their median
    // is what every speed-up divides.
    bc.mutable_profiler()->set_time_budget_s(4);
    // torch.compile's first call (inside the compiled baseline's verify) takes
    // 30+ s on 2 loaded cores.
    bc.mutable_verify()->set_wall_seconds(180);
    std::string text;
    google::protobuf::TextFormat::PrintToString(bc, &text);
    const std::string config_file = *root_ + "/baseline_worker.textproto";
    std::ofstream(config_file) << text;
    *jsonl_ = *root_ + "/baselines.jsonl";
    precompute_log_ = new std::string(Shell("cd " + Cwd() + " && " + Cwd() + "/sandbox/measure_baselines --config=" +
                                            config_file + " --tasks_root=" + *root_ + "/tasks --levels=level1 --out=" +
                                            *jsonl_));
    *precompute_log_ += Shell(Cwd() + "/profiler_service/precompute_baselines --measurements=" + *jsonl_ +
                              " --set=baseline_cache_dir=" + *root_ + "/baselines");
    auto e = Evaluator::Create(c);
    ASSERT_TRUE(e.ok()) << e.status();
    evaluator_ = e->release();
  }
  static void TearDownTestSuite() {
    delete evaluator_;
    evaluator_ = nullptr;
  }
  void SetUp() override {
    if (python_->empty()) GTEST_SKIP() << "no python3 with torch on this machine";
    ASSERT_NE(evaluator_, nullptr);
  }
  // The baseline the precompute stored for the relu task on this worker.
  static absl::StatusOr<v1::Baseline> ReluBaseline() {
    EvaluateRequest req = testing::Request(kRelu, "sandbox/solutions/cpu/relu");
    return BaselineCache(*root_ + "/baselines").Get(BaselineKeyFor(req.task(), "cpu", "cpu", TorchVersion()));
  }
  // The line measure_baselines wrote for `task_id`.
  static absl::StatusOr<v1::BaselineMeasurement> MeasurementLine(const std::string& task_id) {
    absl::StatusOr<std::string> text = ReadFileToString(*jsonl_);
    if (!text.ok()) return text.status();
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      v1::BaselineMeasurement bm;
      if (!google::protobuf::util::JsonStringToMessage(std::string(line), &bm).ok()) {
        return absl::InvalidArgumentError("unparsable line: " + std::string(line.substr(0, 200)));
      }
      if (bm.task_id() == task_id) return bm;
    }
    return absl::NotFoundError("no line for " + task_id + " in " + *jsonl_);
  }
  static std::string TorchVersion() {
    std::string v = Shell(*python_ + " -c 'import torch; print(torch.__version__)'");
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    return v;
  }
  static std::string* python_;
  static std::string* root_;
  static std::string* jsonl_;
  static std::string* precompute_log_;
  static Evaluator* evaluator_;
};
std::string* ProfileCpuTest::python_ = nullptr;
std::string* ProfileCpuTest::root_ = nullptr;
std::string* ProfileCpuTest::jsonl_ = new std::string;
std::string* ProfileCpuTest::precompute_log_ = nullptr;
Evaluator* ProfileCpuTest::evaluator_ = nullptr;

TEST_F(ProfileCpuTest, TaskKeyAgreesWithThePythonHarness) {
  std::ifstream in(kRelu);
  std::stringstream src;
  src << in.rdbuf();
  for (const char* device : {"cpu", "cuda"}) {
    std::string py = Shell("cd " + Cwd() + " && PYTHONPATH=. " + *python_ +
                         " -c 'import sys; from profiler_service.harness import tasks; "
                         "print(tasks.task_hash(open(sys.argv[1]).read(), sys.argv[2]), "
                         "tasks.input_policy_hash(sys.argv[2]))' " + kRelu + " " + device);
    EXPECT_EQ(py, TaskHash(src.str(), device, "") + " " + InputPolicyHash(device, "") + "\n") << device;
  }
  // Task.content_hash as ReadTaskFile fills it: the declared (default cuda) device.
  EXPECT_EQ(testing::Request(kRelu, "sandbox/solutions/cpu/relu").task().content_hash(),
            TaskHash(src.str(), "cuda", ""));
}

// The baseline came through the executor path, not a process timing itself:
// only the reference process driving an executor records a trusted clock
// around each block (spanning the executor's own window) and compares every
// forward; the key is the worker's own.
TEST_F(ProfileCpuTest, BaselineIsTimedThroughTheExecutorPath) {
  absl::StatusOr<v1::BaselineMeasurement> line = MeasurementLine("level1/relu");
  ASSERT_TRUE(line.ok()) << line.status() << "\nprecompute:\n" << *precompute_log_;
  const v1::BaselineMeasurement& bm = *line;
  EXPECT_EQ(bm.timing_path(), "executor");
  EXPECT_TRUE(bm.error().empty()) << bm.error();
  const BaselineKey key = BaselineKeyFor(testing::Request(kRelu, "sandbox/solutions/cpu/relu").task(), "cpu", "cpu",
                                         TorchVersion());
  EXPECT_EQ(bm.task_hash(), key.task_hash);
  EXPECT_EQ(bm.input_policy_hash(), key.input_policy_hash);
  EXPECT_EQ(bm.device().backend(), "cpu");
  EXPECT_EQ(bm.work().output_bytes(), 64 * 1024 * 4) << bm.work().DebugString();  // from the reference's Model
  for (const v1::RawTimingRun* run : {&bm.eager(), &bm.compiled()}) {
    SCOPED_TRACE(run->label());
    EXPECT_TRUE(run->error().empty()) << run->error();
    EXPECT_EQ(run->backend(), "cpu");
    // The protocol's contract: it stops short of min_samples only when its
    // time budget ran out (a loaded machine), and says so.
    ASSERT_GE(run->samples_size(), 1);
    if (run->samples_size() < 10) EXPECT_EQ(run->stop_reason(), "time_budget") << run->samples_size();
    int forwards = 0;
    for (const v1::CallSample& s : run->samples()) {
      EXPECT_GT(s.wall_us(), 0);
      EXPECT_GE(s.forwards(), 1);
      EXPECT_GT(s.trusted_us(), 0);
      EXPECT_GE(s.block_us(), s.wall_us() * s.forwards()) << "the trusted clock spans the executor's window";
      forwards += s.forwards();
    }
    EXPECT_GE(run->rechecks(), forwards) << "every timed forward is compared";
    EXPECT_EQ(run->recheck_failures(), 0);
  }
  EXPECT_EQ(bm.eager().label(), "eager");
  EXPECT_EQ(bm.compiled().label(), "compiled");
  EXPECT_GE(bm.anchor().samples_size(), 2);  // the reference process's anchor, from both jobs
  absl::StatusOr<v1::Baseline> b = ReluBaseline();
  ASSERT_TRUE(b.ok()) << b.status() << "\nprecompute:\n" << *precompute_log_;
  EXPECT_EQ(b->timing_path(), "executor");
  EXPECT_GT(b->anchor_median_us(), 0);
}

// A reference the executor cannot reproduce fails its baseline's verify: the
// line says why, carries no time, and the cache entry is an error (the
// profile stage's "baseline recorded an error": correct, not benchmarked).
TEST_F(ProfileCpuTest, BaselineThatFailsVerifyIsRecordedWithoutATime) {
  absl::StatusOr<v1::BaselineMeasurement> bm = MeasurementLine("level1/nondeterministic");
  ASSERT_TRUE(bm.ok()) << bm.status() << "\nprecompute:\n" << *precompute_log_;
  EXPECT_EQ(bm->timing_path(), "executor");
  EXPECT_EQ(bm->error().rfind("eager: WRONG_ANSWER", 0), 0u) << bm->error();
  EXPECT_EQ(bm->eager().samples_size(), 0);
  EXPECT_EQ(bm->compiled().samples_size(), 0);  // not attempted without an eager time
  EXPECT_TRUE(bm->compiled().error().empty()) << bm->compiled().error();
  EvaluateRequest req = testing::Request(kNondeterministic, "sandbox/solutions/cpu/relu");
  absl::StatusOr<v1::Baseline> b =
      BaselineCache(*root_ + "/baselines").Get(BaselineKeyFor(req.task(), "cpu", "cpu", TorchVersion()));
  ASSERT_TRUE(b.ok()) << b.status() << "\nprecompute:\n" << *precompute_log_;
  EXPECT_FALSE(b->error().empty());
  EXPECT_EQ(b->eager().median_us(), 0);
}

TEST_F(ProfileCpuTest, HonestSolutionGetsItsMeasuredReward) {
  absl::StatusOr<v1::Baseline> b = ReluBaseline();
  ASSERT_TRUE(b.ok()) << b.status() << "\nprecompute:\n" << *precompute_log_;
  ASSERT_GT(b->eager().median_us(), 0) << b->DebugString();
  ASSERT_GT(b->compiled().median_us(), 0) << b->DebugString();
  Verdict v = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
  ASSERT_EQ(v.outcome(), Verdict::OK) << Describe(v);
  std::printf("honest relu: %s\n", Describe(v).substr(0, 400).c_str());
  EXPECT_GE(v.reward(), 1) << Describe(v);
  EXPECT_GT(v.candidate_time_us(), 0);
  // The speed-ups are against the baseline this test measured.
  EXPECT_DOUBLE_EQ(v.eager_time_us(), b->eager().median_us());
  EXPECT_DOUBLE_EQ(v.compile_time_us(), b->compiled().median_us());
  EXPECT_NEAR(v.speedup_vs_eager(), b->eager().median_us() / v.candidate_time_us(), 1e-9);
  // The judge's own figures travel with the worker's verdict (what the agent's Profile line shows).
  EXPECT_DOUBLE_EQ(v.eager_basis().baseline_us(), b->eager().median_us());
  EXPECT_DOUBLE_EQ(v.compile_basis().candidate_us(), v.candidate_time_us());
  // Both sides through one call path: a plain C++ ReLU is within a wide band
  // of torch's (a sanity range on 2 loaded cores, not a speed target).
  EXPECT_GT(v.speedup_vs_eager(), 0.05) << Describe(v);
  EXPECT_LT(v.speedup_vs_eager(), 20) << Describe(v);
  EXPECT_GT(v.speedup_vs_compile(), 0);
  // A speed-up the judge could not tell from the noise is not paid (and is only ever flagged above the margin).
  const bool eager_unresolved = HasFlag(v, kUnresolvedVsEager), compile_unresolved = HasFlag(v, kUnresolvedVsCompile);
  if (eager_unresolved) {
    EXPECT_TRUE(FasterByMoreThan(v.speedup_vs_eager())) << Describe(v);
  }
  if (compile_unresolved) {
    EXPECT_TRUE(FasterByMoreThan(v.speedup_vs_compile())) << Describe(v);
  }
  const double milestone = MilestoneReward(true, eager_unresolved ? 0.0 : v.speedup_vs_eager(),
                                           compile_unresolved ? 0.0 : v.speedup_vs_compile());
  EXPECT_EQ(v.reward(), v.quarantined() ? std::min(milestone, 1.0) : milestone) << Describe(v);
  EXPECT_FALSE(HasFlag(v, "baseline_missing")) << Describe(v);
  EXPECT_FALSE(HasFlag(v, "profile_skipped"));
  EXPECT_TRUE(HasStage(v, "profile"));
  EXPECT_NE(v.summary().find("profile:"), std::string::npos) << v.summary();
  // Every timed block's figure, in order, for telling one odd block from a slow kernel.
  ASSERT_TRUE(v.logs().count("profile"));
  EXPECT_NE(v.logs().at("profile").find("blocks (trusted us a forward; e eager, g graph): e"), std::string::npos)
      << v.logs().at("profile");
}

TEST_F(ProfileCpuTest, SlowerThanEagerEarnsOne) {
  Verdict v = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/testdata/profile/relu_slow"));
  ASSERT_EQ(v.outcome(), Verdict::OK) << Describe(v);
  std::printf("slow relu: %s\n", Describe(v).substr(0, 400).c_str());
  EXPECT_EQ(v.reward(), 1) << Describe(v);
  EXPECT_GT(v.speedup_vs_eager(), 0) << Describe(v);
  EXPECT_LT(v.speedup_vs_eager(), 1.0) << Describe(v);
  EXPECT_FALSE(HasFlag(v, "baseline_missing"));
}

TEST_F(ProfileCpuTest, ExploitsStillGetMinusOne) {
  Verdict hack = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/exploits/cpu/torch_in_forward"));
  EXPECT_EQ(hack.outcome(), Verdict::HACK_DETECTED) << Describe(hack);
  EXPECT_EQ(hack.reward(), -1);
  EXPECT_FALSE(HasStage(hack, "profile"));  // never timed
  // Correct on the five verify sets, then returns stale outputs: only the
  // re-checks of timed calls see it. Without them it would be the fastest.
  Verdict stale = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/testdata/profile/stale_after_verify"));
  EXPECT_EQ(stale.outcome(), Verdict::WRONG_ANSWER) << Describe(stale);
  std::printf("stale after verify: %s\n", Describe(stale).substr(0, 300).c_str());
  EXPECT_EQ(stale.reward(), -1);
  EXPECT_TRUE(HasFlag(stale, "recheck_failed")) << Describe(stale);
  EXPECT_TRUE(evaluator_->serving());
}

// The trust-boundary exploits: each reaches for the timing or the verdict
// from inside the candidate process (frames, gc, the recorded samples, native
// writes, sniffing, a timer signal; the reply's serialisation, a patched and
// restored send; native code rewriting an imported entry point (GOT); work moved into the hand-over, before the clock, into a
// finalizer or after "done"; precision chosen by input statistics; the
// protocol's configuration and the next inputs). Nothing that pays is
// computed there: each is non-OK, or OK at reward <= 1.
TEST_F(ProfileCpuTest, TrustBoundaryExploitsGetNoReward) {
  absl::StatusOr<v1::Baseline> b = ReluBaseline();
  ASSERT_TRUE(b.ok()) << b.status() << "\nprecompute:\n" << *precompute_log_;
  const std::string root = "sandbox/exploits/cpu_timing";
  const std::set<std::string> forgers = {"timing_edit_samples", "timing_native_write", "timing_signal",
                                         "v3_reply_serialise", "v3_patch_restore", "v3_native_got"};
  int seen = 0;
  for (const char* name : {"timing_frames", "timing_gc", "timing_edit_samples", "timing_native_write", "timing_sniff",
                           "timing_signal", "v3_reply_serialise", "v3_patch_restore", "v3_defer_handover",
                           "v3_defer_inputs", "v3_defer_finalizer", "v3_write_after_done", "v3_precision_stats",
                           "v3_read_protocol", "v3_native_got"}) {
    const std::string dir = root + "/" + name;
    const std::string expected = testing::ExpectedOutcome(dir);
    ASSERT_FALSE(expected.empty()) << dir;
    Verdict v = evaluator_->Evaluate(testing::Request(kRelu, dir));
    std::printf("%-22s %s\n", name, Describe(v).substr(0, 300).c_str());
    if (std::string(name) == "v3_write_after_done") {
      // Its write races the reference's snapshot: after it, the area no longer
      // matches the snapshot (HACK_DETECTED); before it, the snapshot holds the
      // overwritten outputs (WRONG_ANSWER). Which comes first moves with load.
      const bool caught_after = v.outcome() == Verdict::HACK_DETECTED && HasFlag(v, "output_written_after_done");
      EXPECT_TRUE(caught_after || v.outcome() == Verdict::WRONG_ANSWER) << Describe(v);
    } else {
      EXPECT_EQ(Verdict::Outcome_Name(v.outcome()), expected) << name << ": " << Describe(v);
    }
    EXPECT_LE(v.reward(), 1) << name;
    if (forgers.count(name) && v.outcome() == Verdict::OK) {
      EXPECT_TRUE(HasFlag(v, "in_process_below_trusted")) << Describe(v);
      EXPECT_GT(v.candidate_time_us(), 2 * b->eager().median_us()) << "the trusted time is the slow kernel's";
    }
    if (std::string(name) == "v3_precision_stats") {
      EXPECT_NE(v.summary().find("precision (strict)"), std::string::npos) << Describe(v);
    }
    EXPECT_EQ(v.precision_policy(), "strict");
    EXPECT_TRUE(evaluator_->serving()) << "worker unhealthy after " << name;
    ++seen;
  }
  EXPECT_EQ(seen, 15);
  // Honest code keeps its measured reward after the suite.
  Verdict v = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
  EXPECT_EQ(v.outcome(), Verdict::OK) << Describe(v);
}

TEST_F(ProfileCpuTest, MissingBaselineIsCorrectButNotBenchmarked) {
  Verdict v = evaluator_->Evaluate(testing::Request("sandbox/testdata/cpu_tasks/softmax.py",
                                                    "sandbox/solutions/cpu/softmax"));
  ASSERT_EQ(v.outcome(), Verdict::OK) << Describe(v);
  EXPECT_EQ(v.reward(), 1);
  EXPECT_TRUE(HasFlag(v, "baseline_missing")) << Describe(v);
  EXPECT_EQ(v.speedup_vs_eager(), 0);
  EXPECT_EQ(v.speedup_vs_compile(), 0);
  EXPECT_GT(v.candidate_time_us(), 0);  // measured all the same
  EXPECT_NE(v.summary().find("baseline missing"), std::string::npos) << v.summary();
  EXPECT_NE(v.summary().find("not benchmarked"), std::string::npos) << v.summary();
}

TEST_F(ProfileCpuTest, SkipProfileRequestKeepsTheCorrectnessReward) {
  EvaluateRequest req = testing::Request(kRelu, "sandbox/solutions/cpu/relu");
  req.set_skip_profile(true);
  Verdict v = evaluator_->Evaluate(req);
  ASSERT_EQ(v.outcome(), Verdict::OK) << Describe(v);
  EXPECT_EQ(v.reward(), 1);
  EXPECT_TRUE(HasFlag(v, "profile_skipped"));
  EXPECT_FALSE(HasStage(v, "profile"));
  EXPECT_EQ(v.speedup_vs_eager(), 0);
}

// A learner on the same GPU holds the lease shared around its steps: a job
// that profiles waits for it (exclusive, stage "gpu_lease"), one that only
// verifies does not take it. Both wait for the worker's GPU (stage "gpu_queue").
TEST_F(ProfileCpuTest, ProfilingWaitsForTheGpuLeaseAndVerifyAloneDoesNot) {
  const GpuLease lease(*root_ + "/gpu.lease");
  absl::StatusOr<GpuLease::Hold> learner_step = lease.Shared();
  ASSERT_TRUE(learner_step.ok()) << learner_step.status();
  EvaluateRequest verify_only = testing::Request(kRelu, "sandbox/solutions/cpu/relu");
  verify_only.set_skip_profile(true);
  Verdict v = evaluator_->Evaluate(verify_only);
  ASSERT_EQ(v.outcome(), Verdict::OK) << Describe(v);
  EXPECT_FALSE(HasStage(v, "gpu_lease"));
  EXPECT_FALSE(HasStage(v, "lease_settle"));
  EXPECT_TRUE(HasStage(v, "gpu_queue")) << Describe(v);  // Every job that reaches the GPU waits its turn.

  absl::Notification done;
  Verdict timed;
  std::thread job([&] {
    timed = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
    done.Notify();
  });
  // The worker waits holding the lease's turn file (common/gpu_lease.h).
  auto turn_free = [&] {
    const int fd = ::open((lease.path() + ".turn").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    const bool free = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0) ::close(fd);
    return free;
  };
  while (turn_free() && !done.HasBeenNotified()) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(done.HasBeenNotified()) << Describe(timed);
  learner_step->Release();
  done.WaitForNotification();
  job.join();
  EXPECT_EQ(timed.outcome(), Verdict::OK) << Describe(timed);
  EXPECT_TRUE(HasStage(timed, "gpu_lease")) << Describe(timed);
  EXPECT_TRUE(HasStage(timed, "gpu_queue")) << Describe(timed);
  // Its clock's settle is a stage of its own (0 here: the CPU backend has no driver samples).
  EXPECT_TRUE(HasStage(timed, "lease_settle")) << Describe(timed);
}

// A baseline timed in the precompute's own process (timing_path "") pays no
// speed-up: it is treated as missing, and so is one measured under an older
// protocol. The same times marked "executor" under the current protocol are
// used, so the test would see a trusted in-process baseline. What is checked
// is which baseline the judge compared with (flags, times, speed-ups), so a
// verdict declined on a loaded machine still tells.
TEST_F(ProfileCpuTest, InProcessOrOldProtocolBaselineNeverPays) {
  const EvaluateRequest req = testing::Request("sandbox/testdata/cpu_tasks/linear_relu.py",
                                               "sandbox/solutions/cpu/linear_relu");
  absl::StatusOr<v1::Baseline> relu = ReluBaseline();
  ASSERT_TRUE(relu.ok()) << relu.status() << "\nprecompute:\n" << *precompute_log_;
  const Verdict unbenchmarked = evaluator_->Evaluate(req);
  ASSERT_GT(unbenchmarked.candidate_time_us(), 0) << Describe(unbenchmarked);
  // A baseline 4x the candidate's time: 4x speed-ups (reward 3) if it counted.
  const double baseline_us = 4 * unbenchmarked.candidate_time_us();
  const BaselineKey key = BaselineKeyFor(req.task(), "cpu", "cpu", TorchVersion());
  v1::Baseline b = *relu;
  b.set_task_id(req.task().id());
  b.set_task_hash(key.task_hash);
  b.set_input_policy_hash(key.input_policy_hash);
  b.mutable_eager()->set_median_us(baseline_us);
  b.mutable_compiled()->set_median_us(baseline_us);
  const BaselineCache cache(*root_ + "/baselines");

  b.clear_timing_path();
  ASSERT_TRUE(cache.Put(b).ok());
  Verdict v = evaluator_->Evaluate(req);
  ASSERT_GT(v.candidate_time_us(), 0) << Describe(v);
  EXPECT_LE(v.reward(), 1) << Describe(v);
  EXPECT_TRUE(HasFlag(v, "baseline_missing")) << Describe(v);
  EXPECT_EQ(v.eager_time_us(), 0) << Describe(v);
  EXPECT_EQ(v.speedup_vs_eager(), 0);
  EXPECT_EQ(v.speedup_vs_compile(), 0);
  if (v.outcome() == Verdict::OK) {
    EXPECT_EQ(v.reward(), 1);
    EXPECT_NE(v.summary().find("not through the executor path"), std::string::npos) << v.summary();
  }

  b.set_timing_path("executor");
  b.set_protocol(kBaselineProtocol - 1);
  ASSERT_TRUE(cache.Put(b).ok());
  v = evaluator_->Evaluate(req);
  ASSERT_GT(v.candidate_time_us(), 0) << Describe(v);
  EXPECT_TRUE(HasFlag(v, "baseline_missing")) << Describe(v);
  EXPECT_EQ(v.speedup_vs_eager(), 0);
  if (v.outcome() == Verdict::OK) {
    EXPECT_NE(v.summary().find("measure it again"), std::string::npos) << v.summary();
  }

  b.set_protocol(kBaselineProtocol);
  ASSERT_TRUE(cache.Put(b).ok());
  v = evaluator_->Evaluate(req);
  ASSERT_GT(v.candidate_time_us(), 0) << Describe(v);
  EXPECT_FALSE(HasFlag(v, "baseline_missing")) << Describe(v);
  EXPECT_DOUBLE_EQ(v.eager_time_us(), baseline_us) << Describe(v);
  EXPECT_GT(v.speedup_vs_eager(), 0) << Describe(v);
}

}  // namespace
}  // namespace kernelrl::sandbox
