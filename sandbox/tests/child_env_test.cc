// SandboxConfig.child_env: what resolution copies from a (fake) host
// environment, what the stages' own variables replace, and what the worker
// refuses at start.
#include "sandbox/child_env.h"

#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "sandbox/evaluator.h"

namespace kernelrl::sandbox {
namespace {

EnvLookup FakeHost(const std::map<std::string, std::string>& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

std::string RandomValue() {
  std::mt19937 rng(std::random_device{}());
  return "/v" + std::to_string(rng());
}

TEST(ChildEnvTest, DefaultPassCopiesOnlyListedVariablesTheHostHas) {
  const std::string path = RandomValue(), ld = RandomValue();
  v1::SandboxConfig c;
  ResolveChildEnvironment(&c, FakeHost({{"PATH", path}, {"LD_LIBRARY_PATH", ld}, {"AWS_SECRET_ACCESS_KEY", "x"}}));
  EXPECT_EQ(ChildEnvValue(c.child_env(), "PATH"), path);
  EXPECT_EQ(ChildEnvValue(c.child_env(), "LD_LIBRARY_PATH"), ld);
  EXPECT_EQ(c.child_env().set().count("AWS_SECRET_ACCESS_KEY"), 0u) << "not in the passed names";
  EXPECT_EQ(c.child_env().set().count("HOME"), 0u) << "listed but unset on the host";
  EXPECT_EQ(c.child_env().pass_size(), static_cast<int>(DefaultPassedNames().size()));
}

TEST(ChildEnvTest, SetWinsOverPassAndAnExplicitPassReplacesTheDefaults) {
  const std::string mine = RandomValue();
  v1::SandboxConfig c;
  c.mutable_child_env()->add_pass("PATH");
  c.mutable_child_env()->add_pass("EXTRA");
  (*c.mutable_child_env()->mutable_set())["PATH"] = mine;
  ResolveChildEnvironment(&c, FakeHost({{"PATH", "/host"}, {"EXTRA", "e"}, {"LD_LIBRARY_PATH", "/l"}}));
  EXPECT_EQ(ChildEnvValue(c.child_env(), "PATH"), mine);
  EXPECT_EQ(ChildEnvValue(c.child_env(), "EXTRA"), "e");
  EXPECT_EQ(c.child_env().set().count("LD_LIBRARY_PATH"), 0u);
}

TEST(ChildEnvTest, StageVariablesReplaceSameNamedOnesAndTheListIsSorted) {
  v1::ChildEnvironment env;
  (*env.mutable_set())["PYTHONPATH"] = "/host/site";
  (*env.mutable_set())["HOME"] = "/root";
  const std::vector<std::string> list = ChildEnvList(env, {{"PYTHONPATH", "/harness"}, {"LC_ALL", "C"}});
  EXPECT_EQ(list, (std::vector<std::string>{"HOME=/root", "LC_ALL=C", "PYTHONPATH=/harness"}));
}

TEST(ChildEnvTest, DefaultsGivePathAndStartRefusesBadNames) {
  v1::SandboxConfig c = WithDefaults(v1::SandboxConfig());
  EXPECT_EQ(ChildEnvValue(c.child_env(), "PATH"), "/usr/bin:/bin") << "no host PATH without a main resolving it";
  EXPECT_TRUE(CheckChildEnvironment(c.child_env()).ok());
  for (const std::string& bad : {std::string(""), std::string("A=B"), std::string("A\0B", 3)}) {
    v1::ChildEnvironment env;
    (*env.mutable_set())[bad] = "v";
    EXPECT_FALSE(CheckChildEnvironment(env).ok()) << "name [" << bad << "]";
  }
  v1::ChildEnvironment nul;
  (*nul.mutable_set())["X"] = std::string("a\0b", 3);
  EXPECT_FALSE(CheckChildEnvironment(nul).ok());
  v1::ChildEnvironment bad_pass;
  bad_pass.add_pass("X=1");
  EXPECT_FALSE(CheckChildEnvironment(bad_pass).ok());
}

}  // namespace
}  // namespace kernelrl::sandbox
