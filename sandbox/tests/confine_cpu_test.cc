// Confinement end to end on the CPU backend (docs/SANDBOX.md, "Filesystem view
// and identity"): secrets are planted where an attacker would look (another
// job's directory, the worker's config next to the work root, a Kubernetes
// service-account token, root's home), then every confine_* exploit runs
// through the real worker. Each must get CRASH with a summary saying what
// stopped it ("confined: ..."), and no planted secret may appear in the
// verdict. Where the host probe says the constructed root and the sandbox
// identity are available, the verdict's contain log must show both happened.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sandbox/contain/contain.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::sandbox {
namespace {

const char* kRelu = "sandbox/testdata/cpu_tasks/relu.py";

std::string Token() {
  std::random_device rd;
  return "kr-secret-" + std::to_string(rd()) + std::to_string(rd());
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// mkdir -p that remembers what it created, so the test removes only that.
class Planted {
 public:
  ~Planted() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      if (unlink(it->c_str()) != 0) rmdir(it->c_str());
    }
  }
  // Writes `text` at `path` unless something is already there; false if not planted.
  bool File(const std::string& path, const std::string& text) {
    if (Exists(path) || !Dirs(path.substr(0, path.rfind('/')))) return false;
    std::ofstream(path) << text;
    if (!Exists(path)) return false;
    made_.push_back(path);
    return true;
  }

 private:
  bool Dirs(const std::string& dir) {
    if (dir.empty() || Exists(dir)) return true;
    if (!Dirs(dir.substr(0, dir.rfind('/')))) return false;
    if (mkdir(dir.c_str(), 0755) != 0) return false;
    made_.push_back(dir);
    return true;
  }
  std::vector<std::string> made_;
};

class ConfineCpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    python_ = new std::string(testing::FindTorchPython());
    if (python_->empty()) return;
    config_ = new SandboxConfig(testing::CpuConfig(*python_));
    auto e = Evaluator::Create(*config_);
    ASSERT_TRUE(e.ok()) << e.status();
    evaluator_ = e->release();
  }
  static void TearDownTestSuite() {
    delete evaluator_;
    evaluator_ = nullptr;
  }
  void SetUp() override {
    if (python_->empty()) GTEST_SKIP() << "no python3 with torch on this machine";
    caps_ = ProbeHostCapabilities();
  }
  static std::string* python_;
  static SandboxConfig* config_;
  static Evaluator* evaluator_;
  int caps_ = 0;
};
std::string* ConfineCpuTest::python_ = nullptr;
SandboxConfig* ConfineCpuTest::config_ = nullptr;
Evaluator* ConfineCpuTest::evaluator_ = nullptr;

TEST_F(ConfineCpuTest, EveryConfinementAttackFailsAndTheVerdictSaysSo) {
  const std::string secret = Token();
  Planted planted;
  const std::string work_root = config_->work_root();
  const std::string parent = work_root.substr(0, work_root.rfind('/'));
  ASSERT_TRUE(planted.File(work_root + "/job-planted-other/workspace/notes.txt", secret));
  ASSERT_TRUE(planted.File(parent + "/worker_config.textproto", "worker_id: \"" + secret + "\"\n"));
  // Host-wide places: planted only where nothing is there already (never
  // touching a real token), removed afterwards.
  const bool token = planted.File("/var/run/secrets/kubernetes.io/serviceaccount/token", secret);
  const bool root_home = planted.File("/root/kernelrl_confine_secret", secret);
  std::printf("planted: other job, worker config%s%s\n", token ? ", service-account token" : "",
              root_home ? ", /root file" : "");

  const std::vector<std::string> names = {"confine_etc_shadow",   "confine_root_home",    "confine_other_job",
                                           "confine_worker_config", "confine_secrets",      "confine_proc_environ",
                                           "confine_host_proc",    "confine_write_outside"};
  const bool full = (caps_ & KR_CAP_PIVOT_ROOT) && (caps_ & KR_CAP_HOST_IDENTITY) && (caps_ & KR_CAP_PID_NS);
  for (const std::string& name : names) {
    Verdict v = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/exploits/cpu/" + name));
    const std::string contain = v.logs().count("contain") ? v.logs().at("contain") : "";
    const std::string candidate = v.logs().count("candidate") ? v.logs().at("candidate") : "";
    SCOPED_TRACE(name + ": " + v.summary() + "\n--- candidate log\n" + candidate.substr(0, 3000));
    EXPECT_EQ(Verdict::Outcome_Name(v.outcome()), "CRASH");
    EXPECT_NE(v.summary().find("confined: "), std::string::npos) << "the verdict does not say what stopped it";
    for (const auto& [key, text] : v.logs()) EXPECT_EQ(text.find(secret), std::string::npos) << "secret in logs." << key;
    EXPECT_EQ(v.summary().find(secret), std::string::npos);
    EXPECT_EQ(candidate.find("LEAKED"), std::string::npos);
    if (full) {
      // The trusted side logged the view; the candidate ran in it, as nobody.
      EXPECT_NE(contain.find("root: filesystem view"), std::string::npos) << contain;
      EXPECT_NE(candidate.find("new_root: ok"), std::string::npos);
      EXPECT_NE(candidate.find("identity (uid 65534 gid 65534, host uid 65534, no capabilities): ok"),
                std::string::npos);
    }
  }
  for (const std::string& dir : {std::string("/var/tmp"), std::string("/usr"), std::string("")}) {
    EXPECT_FALSE(Exists(dir + "/kernelrl_confine_was_here")) << "write outside scratch reached " << dir << "/";
  }
  if (!full) {
    GTEST_SKIP() << "host lacks part of the confinement (" << DescribeMissingCapabilities(caps_)
                 << "): attacks failed, but the view/identity log lines were not required";
  }
}

// Every text of a verdict that goes back to the actor and the logs.
std::string VerdictText(const Verdict& v) {
  std::string all = v.summary();
  for (const auto& [key, text] : v.logs()) all += "\n" + key + ": " + text;
  for (const auto& d : v.diagnostics()) all += "\n" + d.file() + ": " + d.message();
  return all;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The token-pasted assembler attacks, built by g++ outside any sandbox in a
// tree laid out like the worker's (<dir>/work/<job>/ws, the secrets where the
// confine test plants them): the attack is real with this toolchain, so a
// COMPILE_ERROR inside the sandbox means the constructed root stopped it.
TEST_F(ConfineCpuTest, PastedAssemblerAttacksReadTheFileWhereItIsInView) {
  const std::string secret = Token();
  const std::string dir = ::kernelrl::testing::NewTempDir("pasted-control-");
  const std::string ws = dir + "/work/job-x/ws";
  Planted planted;
  ASSERT_TRUE(planted.File(dir + "/work/job-planted-other/workspace/notes.txt", secret + "\n"));
  ASSERT_TRUE(planted.File(dir + "/worker_config.textproto", secret + "\n"));
  for (const std::string name : {"compile_pasted_include", "compile_pasted_incbin"}) {
    ASSERT_TRUE(planted.File(ws + "/kernels/" + name + ".cc",
                             ReadFile("sandbox/exploits/cpu/" + name + "/kernels/relu.cc")));
    const std::string so = dir + "/" + name + ".so", log = dir + "/" + name + ".log";
    const std::string cmd = "cd " + ws + " && g++ -O1 -shared -fPIC -o " + so + " kernels/" + name + ".cc > " + log + " 2>&1";
    const int rc = std::system(cmd.c_str());
    const std::string got = ReadFile(so) + ReadFile(log);
    EXPECT_NE(got.find(secret), std::string::npos) << name << " (g++ rc " << rc << "): " << ReadFile(log);
    unlink(so.c_str());
    unlink(log.c_str());
  }
}

// Compile-time attacks (sandbox/exploits/cpu/compile_*): an absolute or ".."
// include, #line naming a file, #embed, inline-asm .include/.incbin (plain,
// split, token-pasted). Each fails (SANDBOX_VIOLATION from the workspace
// scan, or COMPILE_ERROR because the file is not in the compiler's view) and
// no planted secret appears in the verdict.
TEST_F(ConfineCpuTest, CompileTimeAttacksFailAndLeakNothing) {
  const std::string secret = Token();
  Planted planted;
  const std::string work_root = config_->work_root();
  const std::string parent = work_root.substr(0, work_root.rfind('/'));
  ASSERT_TRUE(planted.File(work_root + "/job-planted-other/workspace/notes.txt", secret + "\n"));
  ASSERT_TRUE(planted.File(parent + "/worker_config.textproto", "worker_id: \"" + secret + "\"\n"));
  planted.File("/var/run/secrets/kubernetes.io/serviceaccount/token", secret);
  planted.File("/root/kernelrl_confine_secret", secret);
  const bool full = (caps_ & KR_CAP_PIVOT_ROOT) && (caps_ & KR_CAP_HOST_IDENTITY);
  int violations = 0, compile_errors = 0;
  for (const std::string name : {"compile_include_shadow", "compile_include_other_job", "compile_line_marker",
                                 "compile_embed", "compile_asm_include", "compile_pasted_include",
                                 "compile_pasted_incbin"}) {
    const std::string dir = "sandbox/exploits/cpu/" + name;
    const std::string expected = testing::ExpectedOutcome(dir);
    Verdict v = evaluator_->Evaluate(testing::Request(kRelu, dir));
    const std::string text = VerdictText(v);
    SCOPED_TRACE(name + ": " + text.substr(0, 3000));
    EXPECT_EQ(Verdict::Outcome_Name(v.outcome()), expected);
    EXPECT_EQ(text.find(secret), std::string::npos) << "secret in the verdict";
    EXPECT_EQ(text.find("LEAKED"), std::string::npos);
    violations += v.outcome() == Verdict::SANDBOX_VIOLATION;
    compile_errors += v.outcome() == Verdict::COMPILE_ERROR;
    if (full && v.outcome() == Verdict::COMPILE_ERROR) {
      // The build log names the view the compiler had and its identity.
      const std::string log = v.logs().count("compile") ? v.logs().at("compile") : "";
      EXPECT_NE(log.find("root: filesystem view"), std::string::npos) << log;
      EXPECT_NE(log.find("new_root: ok"), std::string::npos) << log;
      EXPECT_NE(log.find("identity (uid 65534 gid 65534"), std::string::npos) << log;
    }
  }
  EXPECT_EQ(violations, 5);
  EXPECT_EQ(compile_errors, 2);
  if (!full) GTEST_SKIP() << "host lacks the constructed root or the identity (" << DescribeMissingCapabilities(caps_) << ")";
}

// SandboxConfig.view reaches the zygote: an extra read-only path is in the
// candidate's view (its contain log lists it) and in no other; a relative
// path refuses the worker, naming it.
TEST_F(ConfineCpuTest, ConfiguredViewPathsReachTheCandidate) {
  SandboxConfig bad = *config_;
  bad.set_work_root(config_->work_root() + "-bad-view");
  bad.mutable_view()->add_extra_ro_paths("opt/relative-tools");
  absl::StatusOr<std::unique_ptr<Evaluator>> refused = Evaluator::Create(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("SandboxConfig.view.extra_ro_paths: 'opt/relative-tools'"),
            std::string::npos)
      << refused.status();
  if (!(caps_ & KR_CAP_PIVOT_ROOT)) GTEST_SKIP() << "no constructed root on this host";
  const std::string extra = ::kernelrl::testing::NewTempDir("extra-view-");
  char canonical[4096];
  ASSERT_NE(realpath(extra.c_str(), canonical), nullptr);
  SandboxConfig c = *config_;
  c.set_work_root(config_->work_root() + "-view");
  c.mutable_view()->add_extra_ro_paths(extra);
  absl::StatusOr<std::unique_ptr<Evaluator>> e = Evaluator::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  Verdict v = (*e)->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
  EXPECT_EQ(v.outcome(), Verdict::OK) << v.summary();
  const std::string contain = v.logs().count("contain") ? v.logs().at("contain") : "";
  EXPECT_NE(contain.find(std::string(" ") + canonical), std::string::npos) << contain;
  Verdict other = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
  const std::string plain = other.logs().count("contain") ? other.logs().at("contain") : "";
  EXPECT_EQ(plain.find(canonical), std::string::npos) << plain;
  rmdir(extra.c_str());
}

TEST_F(ConfineCpuTest, HonestCodeStillPassesInTheConstructedRoot) {
  Verdict v = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
  ASSERT_EQ(v.outcome(), Verdict::OK) << v.summary();
  if (caps_ & KR_CAP_PIVOT_ROOT) {
    EXPECT_NE(v.logs().at("contain").find("root: filesystem view"), std::string::npos);
  }
}

}  // namespace
}  // namespace kernelrl::sandbox
