// Confinement end to end on the CPU backend (docs/SANDBOX.md, "Filesystem view
// and identity"): secrets are planted where an attacker would look (another
// job's directory, the worker's config next to the work root, a Kubernetes
// service-account token, root's home), then every confine_* exploit runs
// through the real worker. Each must get CRASH with a summary saying what
// stopped it ("confined: ..."), and no planted secret may appear in the
// verdict. Where the host probe says the constructed root and the sandbox
// identity are available, the verdict's contain log must show both happened.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
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

TEST_F(ConfineCpuTest, HonestCodeStillPassesInTheConstructedRoot) {
  Verdict v = evaluator_->Evaluate(testing::Request(kRelu, "sandbox/solutions/cpu/relu"));
  ASSERT_EQ(v.outcome(), Verdict::OK) << v.summary();
  if (caps_ & KR_CAP_PIVOT_ROOT) {
    EXPECT_NE(v.logs().at("contain").find("root: filesystem view"), std::string::npos);
  }
}

}  // namespace
}  // namespace kernelrl::sandbox
