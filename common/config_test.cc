#include "common/config.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/actor_config.pb.h"

namespace kernelrl {
namespace {

using kernelrl::v1::ActorConfig;

constexpr char kDefaults[] = R"pb(server { grpc_port: 50054 drain_seconds: 2 grace_seconds: 30 }
                                  learner_address: "127.0.0.1:50051")pb";

absl::StatusOr<ActorConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "actor_main");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ActorConfig config;
  absl::StatusOr<ConfigRequest> request = LoadConfig(static_cast<int>(argv.size()), argv.data(), kDefaults, &config);
  if (!request.ok()) return request.status();
  absl::Status valid = ValidateServerConfig(config.mutable_server());
  if (!valid.ok()) return valid;
  return config;
}

std::string WriteTemp(const std::string& text) {
  const std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/cfg_" +
                           std::to_string(std::hash<std::string>()(text)) + ".textproto";
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, DefaultsThenFileThenFlags) {
  const std::string file = WriteTemp("server { grpc_port: 6000 metrics_port: 6001 }\nsandbox_address: \"h:1\"\n");
  auto config = Load({"--config=" + file, "--set=server.grpc_port=7000", "--set", "learner_address=10.0.0.1:9",
                      "--config_text=policy_address: 'p:2'"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server().grpc_port(), 7000);           // flag beats file
  EXPECT_EQ(config->server().metrics_port(), 6001);        // file beats default
  EXPECT_EQ(config->server().drain_seconds(), 2);          // default kept
  EXPECT_EQ(config->sandbox_address(), "h:1");
  EXPECT_EQ(config->learner_address(), "10.0.0.1:9");      // unquoted string quoted for us
  EXPECT_EQ(config->policy_address(), "p:2");
  EXPECT_EQ(config->server().listen_address(), "127.0.0.1");  // filled by validation
}

// Presets are layered (a family preset, then one that changes its engineer): every file
// counts, in the order given, as in the kernelrl CLI; the last alone silently lost the others.
TEST(ConfigTest, RepeatedConfigFilesMergeInOrder) {
  const std::string base = WriteTemp("server { grpc_port: 6000 metrics_port: 6001 }\nsandbox_address: \"h:1\"\n");
  const std::string over = WriteTemp("server { grpc_port: 6500 }\n");
  auto config = Load({"--config=" + base, "--config", over});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server().grpc_port(), 6500);     // the later file wins its fields
  EXPECT_EQ(config->server().metrics_port(), 6001);  // the earlier file's others stay
  EXPECT_EQ(config->sandbox_address(), "h:1");
}

TEST(ConfigTest, UnknownFieldInFileNamesFileAndLine) {
  const std::string file = WriteTemp("server {\n  grpc_prot: 1\n}\n");
  auto config = Load({"--config=" + file});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find(file + ":2:"), std::string::npos) << config.status();
  EXPECT_NE(config.status().message().find("grpc_prot"), std::string::npos) << config.status();
}

TEST(ConfigTest, UnknownFieldInSetIsRejected) {
  auto config = Load({"--set=server.no_such=1"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("has no field named \"no_such\""), std::string::npos) << config.status();
}

TEST(ConfigTest, BadPortIsRejected) {
  for (const char* port : {"server.grpc_port=70000", "server.grpc_port=-5", "server.metrics_port=65536"}) {
    auto config = Load({std::string("--set=") + port});
    ASSERT_FALSE(config.ok()) << port;
    EXPECT_NE(config.status().message().find("outside"), std::string::npos) << config.status();
  }
  auto typed = Load({"--set=server.grpc_port=abc"});
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.status().message().find("--set server.grpc_port=abc"), std::string::npos) << typed.status();
}

TEST(ConfigTest, MissingFileAndUnknownFlag) {
  auto missing = Load({"--config=/nonexistent/kernelrl.textproto"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/kernelrl.textproto"), std::string::npos);
  auto flag = Load({"--port=1"});
  ASSERT_FALSE(flag.ok());
  EXPECT_NE(flag.status().message().find("unknown flag '--port=1'"), std::string::npos);
}

// Tools (sandbox_cli, precompute_baselines): config flags are taken, the
// run's own arguments come back in order for the tool's parser.
TEST(ConfigTest, KeepingRestSeparatesTheRunsArguments) {
  const std::string file = WriteTemp("learner_address: \"from-file:1\"\n");
  std::vector<std::string> args = {"tool",         "--suite=s.txt",        "--config",          file,
                                   "--set",        "server.grpc_port=123", "--settle=1",        "positional",
                                   "--json_out",   "out.jsonl",            "--config_text=policy_address: 'p:3'"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ActorConfig config;
  std::vector<char*> rest;
  auto request = LoadConfigKeepingRest(static_cast<int>(argv.size()), argv.data(), kDefaults, &config, &rest);
  ASSERT_TRUE(request.ok()) << request.status();
  std::vector<std::string> got(rest.begin(), rest.end());
  EXPECT_EQ(got, (std::vector<std::string>{"tool", "--suite=s.txt", "--settle=1", "positional", "--json_out",
                                           "out.jsonl"}));
  EXPECT_EQ(config.learner_address(), "from-file:1");
  EXPECT_EQ(config.server().grpc_port(), 123);
  EXPECT_EQ(config.policy_address(), "p:3");
  EXPECT_EQ(config.server().drain_seconds(), 2);  // default kept
  // Without `rest` the same stray argument is an error, as for a service.
  auto strict = Load({"--settle=1"});
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("unknown flag '--settle=1'"), std::string::npos);
}

TEST(ConfigTest, BadLogLevel) {
  auto config = Load({"--set=server.log_level=loud"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("log_level"), std::string::npos);
}

}  // namespace
}  // namespace kernelrl
