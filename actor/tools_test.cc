// Every tool on its success and error paths, in a real rollout workspace
// (the Bash tool in a contained shell).
#include "actor/tools.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"

namespace kernelrl::actor {
namespace {

Json J(const std::string& text) {
  auto j = ParseJson(text);
  EXPECT_TRUE(j.ok()) << text;
  return j.ok() ? *j : Json::object();
}

class CountingEvaluator final : public EvaluationClient {
 public:
  v1::Verdict Evaluate(const v1::EvaluateRequest& r) override {
    last = r;
    ++calls;
    return next;
  }
  v1::EvaluateRequest last;
  v1::Verdict next;
  int calls = 0;
};

class ToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    limits_.set_bash_default_timeout_s(10);
    limits_.set_bash_max_timeout_s(20);
    limits_.set_output_cap_bytes(2000);
    limits_.set_read_max_lines(50);
    limits_.set_max_file_bytes(100000);
    limits_.set_max_background_jobs(2);
    task_.set_id("t/1");
    task_.set_reference_source("import torch\nclass Model: pass\n");
    auto ws = RolloutWorkspace::Create(::kernelrl::testing::TempDir() + "/tools_ws", task_.reference_source(), "skill text\n");
    ASSERT_TRUE(ws.ok()) << ws.status();
    ws_ = *std::move(ws);
    v1::WorkspaceIsolation iso;
    iso.set_contain(true);
    shell_ = std::make_unique<ShellSession>(ws_->dir(), ws_->control_dir(), std::vector<std::string>{}, iso, 2000);
    tools_ = std::make_unique<ToolRunner>(ws_.get(), shell_.get(), &eval_, &task_, limits_, "req");
  }
  ToolResult Run(const std::string& name, const std::string& args) { return tools_->Run(name, J(args)); }
  void ExpectError(const std::string& name, const std::string& args, const std::string& want) {
    ToolResult r = Run(name, args);
    EXPECT_TRUE(r.is_error) << name << " " << args << " -> " << r.text;
    EXPECT_TRUE(absl::StrContains(r.text, want)) << name << " " << args << " -> " << r.text;
  }

  v1::ToolLimits limits_;
  v1::Task task_;
  CountingEvaluator eval_;
  std::unique_ptr<RolloutWorkspace> ws_;
  std::unique_ptr<ShellSession> shell_;
  std::unique_ptr<ToolRunner> tools_;
};

TEST_F(ToolsTest, WorkspaceConfinesPathsAndIsRemoved) {
  EXPECT_FALSE(ws_->Normalize("/etc/passwd").ok());
  EXPECT_FALSE(ws_->Normalize("a/../../x").ok());
  EXPECT_EQ(*ws_->Normalize("./kernels//a.cu"), "kernels/a.cu");
  EXPECT_EQ(*ws_->Normalize(ws_->dir() + "/model.py"), "model.py");
  std::filesystem::create_symlink("/etc", ws_->dir() + "/etc_link");
  ExpectError("Read", R"({"path": "etc_link/hostname"})", "outside the workspace");
  ExpectError("Write", R"({"path": "etc_link/x", "content": "y"})", "outside the workspace");
  const std::string top = ws_->rollout_dir();
  ws_.reset();
  tools_.reset();
  EXPECT_FALSE(std::filesystem::exists(top));
}

TEST_F(ToolsTest, ReadWriteEditMultiEdit) {
  std::mt19937 rng(std::random_device{}());
  const std::string token = absl::StrCat("v", rng());
  // Write a new file, read ranges back.
  std::string content;
  for (int i = 1; i <= 80; ++i) absl::StrAppend(&content, "line ", i, " ", token, "\n");
  ToolResult w = tools_->Run("Write", Json::object({{"path", Json("kernels/k.cu")}, {"content", Json(content)}}));
  ASSERT_FALSE(w.is_error) << w.text;
  EXPECT_EQ(*ws_->ReadFile("kernels/k.cu", 1 << 20), content);
  ToolResult r = Run("Read", R"({"path": "kernels/k.cu", "offset": 10, "limit": 3})");
  EXPECT_EQ(r.text, absl::StrCat("    10\tline 10 ", token, "\n    11\tline 11 ", token, "\n    12\tline 12 ", token,
                                 "\n... (68 more lines; use offset/limit)\n"));
  EXPECT_TRUE(absl::StrContains(Run("Read", R"({"path": "kernels/k.cu"})").text, "30 more lines"));  // read_max_lines 50
  ExpectError("Read", R"({"path": "kernels/k.cu", "offset": 81})", "past the end");
  ExpectError("Read", R"({"path": "nope.py"})", "file not found: nope.py");
  ExpectError("Read", R"({"path": "kernels"})", "not a regular file");
  ExpectError("Read", R"({"path": "/etc/passwd"})", "absolute");
  // Write to an existing file needs a Read first; model.py is frozen.
  ExpectError("Write", R"({"path": "SKILL.md", "content": "x"})", "has not been read");
  ASSERT_FALSE(Run("Read", R"({"path": "SKILL.md"})").is_error);
  EXPECT_FALSE(Run("Write", R"({"path": "SKILL.md", "content": "x"})").is_error);
  ExpectError("Write", R"({"path": "model.py", "content": "x"})", "frozen");
  ExpectError("Write", R"({"path": "../x", "content": "x"})", "leaves the workspace");
  ExpectError("Write", R"({"path": "kernels/k.cu/x", "content": "x"})", "not a directory");
  // Edit: exact, unique.
  ExpectError("Edit", absl::StrCat(R"({"path": "kernels/k.cu", "old_string": ")", token, R"(", "new_string": "z"})"),
              "occurs 80 times");
  ExpectError("Edit", R"({"path": "kernels/k.cu", "old_string": "absent", "new_string": "z"})", "was not found");
  ExpectError("Edit", R"({"path": "kernels/k.cu", "old_string": "", "new_string": "z"})", "empty");
  ExpectError("Edit", R"({"path": "kernels/k.cu", "old_string": "line 7 ", "new_string": "line 7 "})", "the same");
  ExpectError("Edit", R"({"path": "missing.cu", "old_string": "a", "new_string": "b"})", "file not found");
  EXPECT_FALSE(Run("Edit", R"({"path": "kernels/k.cu", "old_string": "line 7 ", "new_string": "LINE seven "})").is_error);
  EXPECT_TRUE(absl::StrContains(*ws_->ReadFile("kernels/k.cu", 1 << 20), "LINE seven " + token));
  // MultiEdit: all or nothing.
  const std::string before = *ws_->ReadFile("kernels/k.cu", 1 << 20);
  ExpectError("MultiEdit",
              R"({"path": "kernels/k.cu", "edits": [{"old_string": "line 8 ", "new_string": "L8 "}, {"old_string": "line 99", "new_string": "x"}]})",
              "edit 2: old_string was not found");
  EXPECT_EQ(*ws_->ReadFile("kernels/k.cu", 1 << 20), before);
  ToolResult m = Run("MultiEdit",
                     R"({"path": "kernels/k.cu", "edits": [{"old_string": "line 8 ", "new_string": "L8 "}, {"old_string": "L8 ", "new_string": "EIGHT "}]})");
  EXPECT_FALSE(m.is_error) << m.text;
  EXPECT_TRUE(absl::StrContains(*ws_->ReadFile("kernels/k.cu", 1 << 20), "EIGHT " + token));
}

TEST_F(ToolsTest, GlobGrepTodo) {
  ASSERT_FALSE(Run("Write", R"({"path": "kernels/a.cu", "content": "__global__ void a() {}\n"})").is_error);
  ASSERT_FALSE(Run("Write", R"({"path": "kernels/sub/b.cu", "content": "int x;\n__global__ void b() {}\n"})").is_error);
  ASSERT_FALSE(Run("Write", R"({"path": "model_new.py", "content": "import torch\n"})").is_error);
  EXPECT_EQ(Run("Glob", R"({"pattern": "**/*.cu"})").text, "kernels/a.cu\nkernels/sub/b.cu\n");
  EXPECT_EQ(Run("Glob", R"({"pattern": "kernels/*.cu"})").text, "kernels/a.cu\n");
  EXPECT_EQ(Run("Glob", R"({"pattern": "*.txt"})").text, "no files match *.txt");
  EXPECT_EQ(Run("Grep", R"({"pattern": "__global__ void [ab]", "glob": "*.cu"})").text,
            "kernels/a.cu:1:__global__ void a() {}\nkernels/sub/b.cu:2:__global__ void b() {}\n");
  EXPECT_EQ(Run("Grep", R"({"pattern": "import", "path": "model_new.py"})").text, "model_new.py:1:import torch\n");
  EXPECT_EQ(Run("Grep", R"({"pattern": "zzz"})").text, "no matches");
  ExpectError("Grep", R"({"pattern": "(unclosed"})", "invalid regular expression");
  ExpectError("Grep", R"({"pattern": "x", "path": "/etc"})", "absolute");
  EXPECT_TRUE(GlobMatch("**", "a/b/c"));
  EXPECT_FALSE(GlobMatch("*.cu", "k/a.cu"));
  ToolResult t = Run("TodoWrite", R"({"todos": [{"content": "write kernel", "status": "completed"}, {"content": "tune", "status": "in_progress"}]})");
  EXPECT_EQ(t.text, "todo list updated:\n[x] write kernel\n[~] tune\n1/2 completed\n");
}

TEST_F(ToolsTest, BashPersistsStateTimesOutAndRunsBackgroundJobs) {
  std::mt19937 rng(std::random_device{}());
  const std::string v = absl::StrCat(rng());
  EXPECT_EQ(Run("Bash", absl::StrCat(R"({"command": "export KV=)", v, R"(; mkdir -p d && cd d && pwd"})")).text,
            absl::StrCat("exit status 0\n", ws_->dir(), "/d\n"));
  EXPECT_EQ(Run("Bash", R"j({"command": "echo $KV; basename $(pwd)"})j").text, absl::StrCat("exit status 0\n", v, "\nd\n"));
  ToolResult fail = Run("Bash", R"({"command": "echo out; echo err >&2; exit_code_test() { return 3; }; exit_code_test"})");
  EXPECT_TRUE(fail.is_error);
  EXPECT_EQ(fail.text, "exit status 3\nout\nerr\n");
  EXPECT_EQ(Run("Bash", R"({"command": "echo 'unbalanced"})").text.substr(0, 13), "exit status 2");
  ExpectError("Bash", R"({"command": "   "})", "empty");
  // Output cap: head and tail kept.
  ToolResult big = Run("Bash", R"({"command": "seq 1 100000"})");
  EXPECT_TRUE(absl::StrContains(big.text, "bytes elided"));
  EXPECT_TRUE(absl::StrContains(big.text, "\n99999\n100000"));
  EXPECT_LT(big.text.size(), 2300u);
  // Timeout kills the shell; the next call has a fresh one.
  ExpectError("Bash", R"({"command": "echo started; sleep 30", "timeout_s": 1})", "timed out after 1 s");
  EXPECT_EQ(Run("Bash", R"({"command": "echo ${KV:-unset}"})").text, "exit status 0\nunset\n");
  ExpectError("Bash", R"({"command": "exit 4"})", "the shell exited (status 4)");
  EXPECT_EQ(Run("Bash", R"({"command": "echo again"})").text, "exit status 0\nagain\n");
  // No network inside the shell.
  // (seccomp refuses the socket; the net namespace has no route either)
  ToolResult net = Run("Bash", R"j({"command": "(echo > /dev/tcp/1.1.1.1/53) 2>/dev/null; echo rc=$?"})j");
  EXPECT_TRUE(absl::StrContains(net.text, "rc=")) << net.text;
  EXPECT_FALSE(absl::StrContains(net.text, "rc=0")) << net.text;
  // Background jobs.
  ToolResult bg = Run("Bash", R"({"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done", "run_in_background": true})");
  ASSERT_FALSE(bg.is_error) << bg.text;
  EXPECT_TRUE(absl::StrContains(bg.text, "bash_1"));
  std::string seen;
  for (int i = 0; i < 50 && !absl::StrContains(seen, "finished"); ++i) {
    usleep(100000);
    const std::string out = Run("BashOutput", R"({"bash_id": "bash_1"})").text;
    seen += out.substr(out.find('\n') + 1);
    if (absl::StrContains(out, "finished, exit status 0")) seen += "finished";
  }
  EXPECT_TRUE(absl::StrContains(seen, "tick 1\ntick 2\ntick 3\n")) << seen;
  EXPECT_TRUE(absl::EndsWith(seen, "finished")) << seen;
  ASSERT_FALSE(Run("Bash", R"({"command": "sleep 60", "run_in_background": true})").is_error);
  ASSERT_FALSE(Run("Bash", R"({"command": "sleep 60", "run_in_background": true})").is_error);
  ExpectError("Bash", R"({"command": "sleep 60", "run_in_background": true})", "limit");
  EXPECT_FALSE(Run("KillBash", R"({"bash_id": "bash_2"})").is_error);
  EXPECT_TRUE(absl::StrContains(Run("BashOutput", R"({"bash_id": "bash_2"})").text, "finished"));
  ExpectError("KillBash", R"({"bash_id": "bash_2"})", "already finished");
  ExpectError("KillBash", R"({"bash_id": "bash_9"})", "no background job");
  ExpectError("BashOutput", R"({"bash_id": "nope"})", "no background job");
}

TEST_F(ToolsTest, EvaluationToolsSendTheSnapshot) {
  ASSERT_FALSE(Run("Write", R"({"path": "model_new.py", "content": "class ModelNew: pass\n"})").is_error);
  ASSERT_FALSE(Run("Write", R"({"path": "notes.txt", "content": "mine"})").is_error);
  eval_.next.set_outcome(v1::Verdict::COMPILE_ERROR);
  eval_.next.set_summary("1 error");
  auto* d = eval_.next.add_diagnostics();
  d->set_file("kernels/a.cu");
  d->set_line(3);
  d->set_column(5);
  d->set_severity("error");
  d->set_message("expected ';'");
  ToolResult c = Run("Compile", "{}");
  EXPECT_TRUE(c.is_error);
  EXPECT_TRUE(c.has_verdict);
  EXPECT_TRUE(absl::StrContains(c.text, "kernels/a.cu:3:5: error: expected ';'")) << c.text;
  EXPECT_TRUE(eval_.last.skip_profile());
  ASSERT_EQ(eval_.last.workspace().files_size(), 1);  // Not model.py, SKILL.md or notes.txt.
  EXPECT_EQ(eval_.last.workspace().files(0).path(), "model_new.py");
  EXPECT_EQ(eval_.last.task().id(), "t/1");
  EXPECT_EQ(eval_.last.request_id(), "req/eval-1");
  eval_.next = v1::Verdict();
  eval_.next.set_outcome(v1::Verdict::INFRA_ERROR);
  eval_.next.set_summary("no sandbox worker is serving");
  ExpectError("Verify", "{}", "says nothing about your code");
  eval_.next = v1::Verdict();
  eval_.next.set_outcome(v1::Verdict::OK);
  eval_.next.set_speedup_vs_eager(2.5);
  eval_.next.set_speedup_vs_compile(1.25);
  eval_.next.set_reward(3);
  ToolResult p = Run("Profile", "{}");
  EXPECT_FALSE(p.is_error);
  EXPECT_FALSE(eval_.last.skip_profile());
  EXPECT_TRUE(absl::StrContains(p.text, "speed-up vs eager 2.500x, vs torch.compile 1.250x")) << p.text;
  EXPECT_TRUE(absl::StrContains(p.text, "reward 3"));
  EXPECT_EQ(tools_->num_evaluations(), 3);
  ExpectError("Nope", "{}", "unknown tool");
}

// The times beside the speed-ups are the ones the judge took each from (Verdict.eager_basis /
// compile_basis, copy offsets included), never figures re-derived from the verdict's other fields.
TEST_F(ToolsTest, ProfileShowsTheFiguresEachSpeedUpCompared) {
  ASSERT_TRUE(Run("Write", R"({"path": "model_new.py", "content": "x"})").text.size() > 0);
  auto basis = [](double cand, double base, bool cand_graph, bool base_graph) {
    v1::SpeedUpBasis b;
    b.set_candidate_us(cand);
    b.set_baseline_us(base);
    b.set_candidate_graph(cand_graph);
    b.set_baseline_graph(base_graph);
    return b;
  };
  v1::Verdict v;
  v.set_outcome(v1::Verdict::OK);
  v.set_reward(2);
  v.set_candidate_time_us(60);  // the fields beside the basis: not what the text shows
  v.set_candidate_graph_time_us(30);
  v.set_eager_time_us(50);
  v.set_eager_graph_time_us(45);
  v.set_compile_time_us(70);
  v.set_compile_graph_time_us(27);
  v.set_speedup_vs_eager(1.5);
  v.set_speedup_vs_compile(0.9);
  *v.mutable_eager_basis() = basis(30, 45, true, true);
  *v.mutable_compile_basis() = basis(30, 27, true, true);
  eval_.next = v;
  std::string text = Run("Profile", "{}").text;
  EXPECT_TRUE(absl::StrContains(
      text, "vs torch.compile 0.900x (graph-replayed: candidate 30.00 us, eager 45.00 us, torch.compile 27.00 us)"))
      << text;
  // A baseline with a replayed figure on one side only: that side graph with graph, the other launched.
  *v.mutable_compile_basis() = basis(60, 70, false, false);
  eval_.next = v;
  text = Run("Profile", "{}").text;
  EXPECT_TRUE(absl::StrContains(text, "(candidate 30.00 us against eager 45.00 us, graph-replayed; candidate 60.00 us "
                                      "against torch.compile 70.00 us)"))
      << text;
  // A candidate that declined graphs, held to the baselines' replayed figures.
  *v.mutable_eager_basis() = basis(60, 45, false, true);
  *v.mutable_compile_basis() = basis(60, 27, false, true);
  eval_.next = v;
  text = Run("Profile", "{}").text;
  EXPECT_TRUE(absl::StrContains(text, "(candidate 60.00 us, no graph-replayed figure, against eager 45.00 us "
                                      "graph-replayed; candidate 60.00 us, no graph-replayed figure, against "
                                      "torch.compile 27.00 us graph-replayed)"))
      << text;
  // Launched figures on both sides, with our copies taken off at common rates: the candidate's time
  // differs between the two ratios (each baseline's copy rates), and the judge's figures are shown.
  *v.mutable_eager_basis() = basis(63.2, 50, false, false);
  *v.mutable_compile_basis() = basis(61.7, 70, false, false);
  eval_.next = v;
  text = Run("Profile", "{}").text;
  EXPECT_TRUE(absl::StrContains(text, "(candidate 63.20 us against eager 50.00 us; candidate 61.70 us against "
                                      "torch.compile 70.00 us)"))
      << text;
  // A verdict judged before the basis was recorded (one from a verdict cache): the ratios alone.
  v.clear_eager_basis();
  v.clear_compile_basis();
  eval_.next = v;
  text = Run("Profile", "{}").text;
  EXPECT_TRUE(absl::StrContains(text, "speed-up vs eager 1.500x, vs torch.compile 0.900x\n")) << text;
}

}  // namespace
}  // namespace kernelrl::actor
