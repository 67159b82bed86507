// Every rule of DecideVerifyOutcome on facts built here, plus the precedence
// between rules that a real candidate can trigger together (a hack flag and a
// crash, a timeout and an error, ...). Inputs vary per run (random set counts,
// sizes, texts) so no result is a constant the test could have memorised.
#include "sandbox/verify_outcome.h"

#include <csignal>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

using v1::sandbox::HarnessJob;
using v1::sandbox::HarnessVerifyReply;
using v1::sandbox::HarnessVerifyFacts;

// Sizes as the summaries print them (all >= 1 GiB here).
std::string Gib(int64_t bytes) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.2f GiB", bytes / double(int64_t{1} << 30));
  return buf;
}

class VerifyOutcomeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    n_ = std::uniform_int_distribution<int>(5, 9)(rng_);
    job_.set_kind("verify");
    job_.set_device("cpu");
    job_.set_num_sets(n_);
    job_.set_wall_seconds(std::uniform_int_distribution<int>(10, 300)(rng_) + 0.5);
    job_.set_resident_memory_bytes(int64_t{std::uniform_int_distribution<int>(2, 40)(rng_)} << 30);
    job_.set_cgroup_memory_bytes(job_.resident_memory_bytes() + (int64_t{3} << 30));
    reply_.mutable_facts();  // present, all zero
  }

  HarnessVerifyFacts& facts() { return *reply_.mutable_facts(); }
  // `k` sets compared, all right, distributions cycling through a few names.
  void Sets(int k) {
    static const char* const kDists[] = {"task", "normal", "uniform_pm1", "large_magnitude"};
    for (int i = 0; i < k; ++i) {
      auto* s = facts().add_sets();
      s->set_set(i);
      s->set_dist(kDists[i % 4]);
      s->set_ok(true);
    }
  }
  void AllSetsDone() {
    Sets(n_);
    facts().set_candidate_done(true);
  }
  void Error(const std::string& kind, const std::string& stage, const std::string& message) {
    auto* e = facts().mutable_candidate_error();
    e->set_kind(kind);
    e->set_stage(stage);
    e->set_message(message);
  }
  VerifyOutcome Decide() const { return DecideVerifyOutcome(job_, reply_); }
  static bool HasFlag(const VerifyOutcome& o, const std::string& f) {
    return std::find(o.flags.begin(), o.flags.end(), f) != o.flags.end();
  }
  std::string Word() { return absl::StrCat("w", std::uniform_int_distribution<int>(0, 1 << 30)(rng_)); }

  std::mt19937 rng_{std::random_device{}()};
  int n_ = 5;
  HarnessJob job_;
  HarnessVerifyReply reply_;
};

TEST_F(VerifyOutcomeTest, CorrectOnEverySetIsOkWithTheDistributions) {
  AllSetsDone();
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::OK);
  EXPECT_EQ(o.sets_passed, n_);
  std::string dists;
  for (const auto& s : facts().sets()) dists += (dists.empty() ? "" : ", ") + s.dist();
  EXPECT_EQ(o.summary, absl::StrCat("correct on ", n_, " input sets (", dists, ")"));
  EXPECT_TRUE(o.flags.empty());
}

TEST_F(VerifyOutcomeTest, OkNeedsTheExecutorsDone) {
  Sets(n_);  // every set right, but no "done" and no profile phase
  EXPECT_EQ(Decide().outcome, Verdict::INFRA_ERROR);
  EXPECT_EQ(Decide().summary, "verify ended without a complete report");
  facts().set_profile_started(true);
  const std::string why = Word();
  facts().set_profile_detail(why);
  EXPECT_EQ(Decide().outcome, Verdict::CRASH);
  EXPECT_EQ(Decide().summary, "candidate stopped while being profiled: " + why);
  facts().clear_profile_detail();
  EXPECT_EQ(Decide().summary, "candidate stopped while being profiled");
}

TEST_F(VerifyOutcomeTest, NoFactsIsInfraError) {
  HarnessVerifyReply bare;
  (*bare.mutable_logs())["candidate"] = Word();  // logs without facts decide nothing
  VerifyOutcome o = DecideVerifyOutcome(job_, bare);
  EXPECT_EQ(o.outcome, Verdict::INFRA_ERROR);
  EXPECT_EQ(o.summary, "zygote sent no verify facts");
}

TEST_F(VerifyOutcomeTest, ReferenceErrorComesFirstAndNamesItsLastLine) {
  AllSetsDone();
  facts().set_signal(SIGSYS);
  facts().add_candidate_flags("monkey_patch");
  const std::string last = "RuntimeError: " + Word();
  facts().set_ref_error("Traceback (most recent call last):\n  File \"x\"\n" + last + "\n\n");
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::INFRA_ERROR);
  EXPECT_EQ(o.summary, "reference failed: " + last);
  EXPECT_TRUE(HasFlag(o, "monkey_patch"));  // the candidate's flags are reported whatever the rule
}

TEST_F(VerifyOutcomeTest, SigsysIsSandboxViolationAndSaysWhenProfiled) {
  Sets(n_ - 1);
  facts().set_signal(SIGSYS);
  Error("cuda", "forward", "CUDA error: x");  // SIGSYS wins over a reported error
  VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::SANDBOX_VIOLATION);
  EXPECT_TRUE(absl::StartsWith(o.summary, "killed by seccomp (SIGSYS): forbidden system call")) << o.summary;
  EXPECT_TRUE(HasFlag(o, "seccomp_kill"));
  facts().set_profile_started(true);
  o = Decide();
  EXPECT_TRUE(absl::StartsWith(o.summary, "killed by seccomp (SIGSYS) while being profiled: ")) << o.summary;
}

TEST_F(VerifyOutcomeTest, AuditViolationListsTheAuditOrTheMessage) {
  Error("violation", "import", "PermissionError: blocked\nopen('/etc/x')\n");
  facts().add_candidate_flags("threads_spawned");  // a violation outranks a hack flag
  VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::SANDBOX_VIOLATION);
  EXPECT_EQ(o.summary, "sandbox violation: open('/etc/x')");
  EXPECT_EQ(o.flags, (std::vector<std::string>{"audit_violation", "threads_spawned"}));
  const std::string a = Word(), b = Word();
  facts().mutable_candidate_error()->add_audit(a);
  facts().mutable_candidate_error()->add_audit(b);
  EXPECT_EQ(Decide().summary, "sandbox violation: " + a + "; " + b);
}

TEST_F(VerifyOutcomeTest, EveryHackFlagAloneIsHackDetected) {
  for (const std::string& flag : VerifyHackFlags()) {
    reply_.Clear();
    AllSetsDone();  // correct outputs do not excuse a hack
    facts().add_candidate_flags(flag);
    facts().add_candidate_flags("cupti_inactive");  // not a hack flag: reported only
    const VerifyOutcome o = Decide();
    EXPECT_EQ(o.outcome, Verdict::HACK_DETECTED) << flag;
    EXPECT_EQ(o.summary, flag);
    EXPECT_TRUE(HasFlag(o, "cupti_inactive"));
  }
  reply_.Clear();
  AllSetsDone();
  facts().add_candidate_flags("cupti_inactive");
  EXPECT_EQ(Decide().outcome, Verdict::OK);
}

TEST_F(VerifyOutcomeTest, HackSummaryNamesSortedHacksFirstTwoDetailsAndTorchOps) {
  facts().add_candidate_flags("threads_spawned");
  facts().add_candidate_flags("monkey_patch");
  facts().add_details("");
  const std::string d1 = Word(), d2 = Word(), d3 = Word();
  for (const std::string& d : {d1, std::string(), d2, d3}) facts().add_details(d);
  Error("torch_op", "forward", "TorchOpForbidden");
  facts().mutable_candidate_error()->add_torch_ops("aten::relu");
  facts().mutable_candidate_error()->add_torch_ops("aten::add");
  facts().set_timed_out(true);  // a hack outranks the timeout
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::HACK_DETECTED);
  EXPECT_EQ(o.summary, absl::StrCat("monkey_patch, threads_spawned, torch_op_in_forward (", d1, "; ", d2,
                                    "; aten::relu, aten::add)"));
  EXPECT_EQ(o.flags, (std::vector<std::string>{"monkey_patch", "threads_spawned", "torch_op_in_forward"}));
}

TEST_F(VerifyOutcomeTest, TorchOpErrorAloneIsHackWithItsFlag) {
  Error("torch_op", "forward", "x");
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::HACK_DETECTED);
  EXPECT_EQ(o.summary, "torch_op_in_forward");
  EXPECT_EQ(o.flags, std::vector<std::string>{"torch_op_in_forward"});
}

TEST_F(VerifyOutcomeTest, WatchdogMemoryCapIsCrashWithSizes) {
  Sets(1);
  const int64_t at = job_.resident_memory_bytes() + (int64_t{std::uniform_int_distribution<int>(1, 900)(rng_)} << 20);
  facts().set_memory_exceeded(true);
  facts().set_memory_at_kill_bytes(at);
  facts().set_signal(SIGKILL);
  facts().set_timed_out(true);  // the cap outranks the wall limit
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::CRASH);
  EXPECT_EQ(o.summary, absl::StrCat("host memory ", Gib(at), " > cap ",
                                    Gib(job_.resident_memory_bytes()),
                                    ": killed (resident memory of the candidate's processes; the watchdog killed "
                                    "the process group)"));
  EXPECT_EQ(o.flags, std::vector<std::string>{"host_memory_cap"});
}

TEST_F(VerifyOutcomeTest, CgroupOomKillIsCrashWithTheLimit) {
  facts().set_cgroup_oom_kills(std::uniform_int_distribution<int>(1, 4)(rng_));
  facts().set_signal(SIGKILL);
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::CRASH);
  EXPECT_EQ(o.summary, absl::StrCat("host memory over the candidate cgroup's memory.max (",
                                    Gib(job_.cgroup_memory_bytes()),
                                    "): killed by the kernel OOM killer"));
  EXPECT_TRUE(HasFlag(o, "host_memory_cap"));
  facts().set_cgroup_oom_kills(-1);  // unknown count: not an OOM kill
  EXPECT_EQ(Decide().summary, "candidate killed by SIGKILL (memory limit or OOM killer)");
}

TEST_F(VerifyOutcomeTest, WallLimitAndCpuLimitAreTimeout) {
  facts().set_timed_out(true);
  facts().set_signal(SIGKILL);
  Error("cuda", "forward", "late");  // the kill is why it raised
  VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::TIMEOUT);
  char wall[32];
  snprintf(wall, sizeof(wall), "%g", job_.wall_seconds());
  EXPECT_EQ(o.summary, absl::StrCat("verify ran past its ", wall, " s wall limit (process group killed)"));
  facts().set_timed_out(false);
  facts().set_signal(SIGXCPU);
  o = Decide();
  EXPECT_EQ(o.outcome, Verdict::TIMEOUT);
  EXPECT_EQ(o.summary, "CPU-time limit reached (SIGXCPU)");
}

TEST_F(VerifyOutcomeTest, CudaErrorsAndKernelErrorsOnCuda) {
  const std::string last = "CUDA error: an illegal memory access " + Word();
  Error("cuda", "forward", "Traceback\n  x\n" + last + "\n");
  EXPECT_EQ(Decide().outcome, Verdict::CUDA_ERROR);
  EXPECT_EQ(Decide().summary, "CUDA error: " + last);
  Error("kernel_error", "forward", last);
  EXPECT_EQ(Decide().outcome, Verdict::CRASH);  // on the CPU backend a kernel error is a crash
  EXPECT_EQ(Decide().summary, "forward raised: " + last);
  job_.set_device("cuda");
  EXPECT_EQ(Decide().outcome, Verdict::CUDA_ERROR);
}

TEST_F(VerifyOutcomeTest, OomAndOtherErrorsAreCrash) {
  const std::string last = "MemoryError: " + Word();
  Error("oom", "forward", last);
  VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::CRASH);
  EXPECT_EQ(o.summary, "out of memory: " + last);
  EXPECT_TRUE(HasFlag(o, "oom"));
  Error("exception", "import", "ValueError: " + last);
  facts().set_signal(SIGSEGV);  // the error is the better summary
  o = Decide();
  EXPECT_EQ(o.outcome, Verdict::CRASH);
  EXPECT_EQ(o.summary, "import raised: ValueError: " + last);
  EXPECT_FALSE(HasFlag(o, "oom"));
}

TEST_F(VerifyOutcomeTest, SignalsAreCrashByName) {
  Sets(2);
  facts().set_signal(SIGSEGV);
  EXPECT_EQ(Decide().outcome, Verdict::CRASH);
  EXPECT_EQ(Decide().summary, "candidate killed by SIGSEGV");
  facts().set_signal(SIGKILL);
  EXPECT_EQ(Decide().summary, "candidate killed by SIGKILL (memory limit or OOM killer)");
  facts().set_signal(SIGABRT);
  EXPECT_EQ(Decide().summary, "candidate killed by SIGABRT");
  facts().set_signal(SIGRTMIN + 3);
  EXPECT_EQ(Decide().summary, absl::StrCat("candidate killed by ", SIGRTMIN + 3));
}

TEST_F(VerifyOutcomeTest, InputMutationInVerifyOrProfileIsWrongAnswer) {
  AllSetsDone();
  facts().set_mutated(true);
  VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::WRONG_ANSWER);
  EXPECT_EQ(o.summary, "forward modified its inputs");
  EXPECT_EQ(o.flags, std::vector<std::string>{"input_mutation"});
  facts().set_mutated(false);
  facts().set_profile_mutated(true);
  EXPECT_EQ(Decide().outcome, Verdict::WRONG_ANSWER);
  EXPECT_TRUE(HasFlag(Decide(), "input_mutation"));
}

TEST_F(VerifyOutcomeTest, FirstWrongSetIsTheSummary) {
  Sets(n_);
  const int bad = std::uniform_int_distribution<int>(0, n_ - 2)(rng_);
  const std::string why = absl::StrCat("set ", bad, " (normal) output 0: ", Word());
  facts().mutable_sets(bad)->set_ok(false);
  facts().mutable_sets(bad)->set_detail(why);
  facts().mutable_sets(n_ - 1)->set_ok(false);
  facts().mutable_sets(n_ - 1)->set_detail("later");
  facts().set_candidate_done(true);
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::WRONG_ANSWER);
  EXPECT_EQ(o.summary, why);
  EXPECT_EQ(o.sets_passed, n_ - 2);
}

TEST_F(VerifyOutcomeTest, FailedRecheckIsWrongAnswerWithCounts) {
  AllSetsDone();
  facts().set_profile_started(true);
  const int rechecks = std::uniform_int_distribution<int>(3, 40)(rng_);
  const int failed = std::uniform_int_distribution<int>(1, rechecks)(rng_);
  facts().set_rechecks(rechecks);
  facts().set_recheck_failures(failed);
  const std::string why = "timed call 7 output 0: " + Word();
  facts().set_profile_detail(why);
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.outcome, Verdict::WRONG_ANSWER);
  EXPECT_EQ(o.summary, absl::StrCat("a timed forward was wrong (", failed, " failing of ", rechecks,
                                    " forwards compared): ", why));
  EXPECT_EQ(o.flags, std::vector<std::string>{"recheck_failed"});
  facts().set_recheck_failures(0);
  EXPECT_EQ(Decide().outcome, Verdict::OK);
}

TEST_F(VerifyOutcomeTest, ExitBeforeEverySetIsCrashWithCode) {
  const int k = std::uniform_int_distribution<int>(0, n_ - 1)(rng_);
  Sets(k);
  const int code = std::uniform_int_distribution<int>(1, 120)(rng_);
  facts().set_exit_code(code);
  EXPECT_EQ(Decide().outcome, Verdict::CRASH);
  EXPECT_EQ(Decide().summary, absl::StrCat("candidate exited with code ", code));
  // After every set an exit code alone does not fail a candidate that said done.
  reply_.Clear();
  AllSetsDone();
  facts().set_exit_code(code);
  EXPECT_EQ(Decide().outcome, Verdict::OK);
}

TEST_F(VerifyOutcomeTest, StoppedEarlyIsCrashWithTheLastDetail) {
  const int k = std::uniform_int_distribution<int>(0, n_ - 1)(rng_);
  Sets(k);
  EXPECT_EQ(Decide().outcome, Verdict::CRASH);
  EXPECT_EQ(Decide().summary, absl::StrCat("candidate stopped after ", k, " of ", n_, " input sets"));
  const std::string last = Word();
  facts().add_details("first");
  facts().add_details(last);
  facts().add_details("");  // empty lines are not details
  EXPECT_EQ(Decide().summary, absl::StrCat("candidate stopped after ", k, " of ", n_, " input sets: ", last));
}

TEST_F(VerifyOutcomeTest, SummaryIsCappedAndSaysSo) {
  const std::string why(700 + std::uniform_int_distribution<int>(0, 300)(rng_), 'x');
  Sets(1);
  facts().mutable_sets(0)->set_ok(false);
  facts().mutable_sets(0)->set_detail(why);
  const VerifyOutcome o = Decide();
  EXPECT_EQ(o.summary, std::string(500, 'x') + absl::StrCat(" [... ", why.size() - 500, " bytes cut]"));
  // Never inside a UTF-8 character: "é" (2 bytes) straddling byte 500 is cut whole.
  facts().mutable_sets(0)->set_detail(std::string(499, 'x') + "\xc3\xa9" + why);
  EXPECT_EQ(Decide().summary, std::string(499, 'x') + absl::StrCat(" [... ", 2 + why.size(), " bytes cut]"));
}

TEST(LastLineTest, StripsAndSplitsLikePython) {
  EXPECT_EQ(LastLine(""), "");
  EXPECT_EQ(LastLine(" \n\t "), "");
  EXPECT_EQ(LastLine("one"), "one");
  EXPECT_EQ(LastLine("a\nb c \n\n"), "b c");
  EXPECT_EQ(LastLine("a\r\nb"), "b");
  EXPECT_EQ(LastLine("a\rb"), "b");
  EXPECT_EQ(LastLine("a\x0b" "b"), "b");
  EXPECT_EQ(LastLine("a\xe2\x80\xa8" "b"), "b");  // U+2028
  EXPECT_EQ(LastLine("caf\xc3\xa9"), "caf\xc3\xa9");
}

}  // namespace
}  // namespace kernelrl::sandbox
