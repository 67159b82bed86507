// CommandLine: the precedence of the config sources, human flags onto fields,
// one-line errors with exit code 2; ServiceArgs: what reaches a service.
#include "tools/cli/command_line.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/cli_config.pb.h"
#include "tools/cli/local_cluster.h"

namespace kernelrl::cli {
namespace {

struct Argv {
  explicit Argv(std::vector<std::string> args) : strings(std::move(args)) {
    for (std::string& s : strings) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

std::string TempFile(const std::string& text) {
  std::string path = absl::StrCat(testing::TempDir(), "/cfg-", std::random_device{}(), ".textproto");
  std::ofstream(path) << text;
  return path;
}

// Runs the parse with stderr captured; returns the code (or -1 for "go on").
int Parse(CommandLine& cl, std::vector<std::string> args, const std::string& defaults, std::string* err) {
  Argv a(std::move(args));
  testing::internal::CaptureStderr();
  std::optional<int> code = cl.Parse(a.argc(), a.argv(), defaults);
  *err = testing::internal::GetCapturedStderr();
  return code ? *code : -1;
}

TEST(CommandLine, LaterSourcesWin) {
  std::mt19937 rng(std::random_device{}());
  const int d = 1 + rng() % 50, c = d + 1 + rng() % 50, f = c + 1 + rng() % 50, s = f + 1 + rng() % 50;
  v1::UpConfig o;
  CommandLine cl("up", "test", &o);
  cl.Flag("--actors", "actors", "actors");
  cl.Flag("--run_dir", "paths.run_dir", "run dir");
  const std::string file = TempFile(absl::StrCat("actors: ", c, "\nbackend: \"cpu\"\nready_timeout_s: 7\n"));
  std::string err;
  // Defaults < --config: backend and ready_timeout_s come from the file.
  ASSERT_EQ(Parse(cl, {"up", "--config=" + file}, absl::StrCat("actors: ", d, " backend: \"auto\""), &err), -1) << err;
  EXPECT_EQ(o.actors(), c);
  EXPECT_EQ(o.backend(), "cpu");

  v1::UpConfig o2;
  CommandLine cl2("up", "test", &o2);
  cl2.Flag("--actors", "actors", "actors");
  cl2.Flag("--run_dir", "paths.run_dir", "run dir");
  // --config < flag < --set, whatever their order on the command line.
  ASSERT_EQ(Parse(cl2,
                  {"up", absl::StrCat("--set=actors=", s), absl::StrCat("--actors=", f), "--config=" + file,
                   "--run_dir=/x/y"},
                  "", &err),
            -1)
      << err;
  EXPECT_EQ(o2.actors(), s);
  EXPECT_EQ(o2.paths().run_dir(), "/x/y");
  EXPECT_EQ(o2.ready_timeout_s(), 7);
  EXPECT_EQ(cl2.sets(), std::vector<std::string>{absl::StrCat("actors=", s)});
}

TEST(CommandLine, SwitchesAndMappings) {
  v1::UpConfig o;
  CommandLine cl("up", "test", &o);
  cl.Switch("--check", "check", "check");
  cl.Flag("--job_spec", [&cl](const std::string& v) -> absl::StatusOr<std::string> {
    auto t = cl.Assign("job_spec_file", v);
    if (!t.ok()) return t;
    return *t + " job: \"spec\"";
  }, "spec");
  std::string err;
  ASSERT_EQ(Parse(cl, {"up", "--check", "--job_spec=/a/b.textproto"}, "job: \"quickstart\"", &err), -1) << err;
  EXPECT_TRUE(o.check());
  EXPECT_EQ(o.job(), "spec");
  EXPECT_EQ(o.job_spec_file(), "/a/b.textproto");
}

TEST(CommandLine, ErrorsAreOneLineAndExitTwo) {
  const std::string bad_file = TempFile("actors: 1\nno_such_field: 2\n");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"up", "--no_such_flag"},
                                             {"up", "--actors=three"},
                                             {"up", "--set=paths.nope=1"},
                                             {"up", "--config=" + bad_file},
                                             {"up", "--config=/no/such/file.textproto"},
                                             {"up", "--preset=no_such_preset"}}) {
    v1::UpConfig o;
    CommandLine cl("up", "test", &o);
    cl.Flag("--actors", "actors", "actors");
    std::string err;
    EXPECT_EQ(Parse(cl, args, "", &err), 2) << args.back();
    EXPECT_EQ(err.rfind("kernelrl up: ", 0), 0u) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

TEST(CommandLine, PrintConfigExitsZeroWithTheEffectiveConfig) {
  v1::UpConfig o;
  CommandLine cl("up", "test", &o);
  Argv a({"up", "--print_config", "--set=actors=5"});
  testing::internal::CaptureStdout();
  std::optional<int> code = cl.Parse(a.argc(), a.argv(), "backend: \"cpu\"");
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  EXPECT_NE(out.find("actors: 5"), std::string::npos) << out;
  EXPECT_NE(out.find("backend: \"cpu\""), std::string::npos) << out;
}

TEST(ServiceArgs, ForwardsTheServicesFieldsAndItsSetsWithZeros) {
  v1::UpConfig o;
  CommandLine cl("up", "test", &o);
  const int wall = 1 + std::random_device{}() % 100;
  const std::string file = TempFile(absl::StrCat("sandbox { verify { wall_seconds: ", wall, " } }\n"));
  std::string err;
  ASSERT_EQ(Parse(cl, {"up", "--config=" + file, "--set=sandbox.verdict_cache.max_entries=0", "--set=actors=1"}, "",
                  &err),
            -1)
      << err;
  const std::vector<std::string> args = ServiceArgs(o, cl.sets(), "sandbox");
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0].rfind("--config_text=", 0), 0u);
  EXPECT_NE(args[0].find(absl::StrCat("wall_seconds: ", wall)), std::string::npos) << args[0];
  // A zero is not in the message's text (proto3), so the --set itself goes on.
  EXPECT_EQ(args[1], "--set=verdict_cache.max_entries=0");
  EXPECT_TRUE(ServiceArgs(o, cl.sets(), "learner").empty());
}

}  // namespace
}  // namespace kernelrl::cli
