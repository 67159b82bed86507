// Each of the four binaries, over a real loopback gRPC connection: health
// SERVING; on SIGTERM health turns NOT_SERVING while an in-flight call
// finishes; the process exits 0 within drain + grace. Bad configuration gives
// one clear error line and exit code 2.
#include <cstdlib>
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/diagnostics.grpc.pb.h"
#include "proto/learner.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/subprocess.h"

namespace kernelrl {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using kernelrl::testing::ReadPortFile;
using kernelrl::testing::Subprocess;
using kernelrl::testing::TempDir;

constexpr double kDrainS = 1.0;
constexpr double kGraceS = 4.0;

struct Binary {
  const char* name;
  const char* path;
  // Per-binary settings for a machine without a GPU (CI): the sandbox runs its CPU backend.
  std::vector<std::string> cpu_args = {};
};

// The actor needs a tokenizer to start: a small ChatML one made once, by the
// fixture script the agent's tests use.
std::string ActorTokenizer() {
  static const std::string path = [] {
    const std::string dir = TempDir() + "/actor_tokenizer";
    const std::string cmd = "python3 agent/tokenizer/testdata/make_tokenizer_fixtures.py " + dir + " chat";
    return std::system(cmd.c_str()) == 0 ? dir + "/tokenizer.json" : std::string();
  }();
  return path;
}

// Whether the server's own gauge of RPCs being handled has reached `want` within `seconds`: the
// in-flight call is in the server before the signal, however loaded the machine.
bool InFlightWithin(int metrics_port, double want, double seconds) {
  httplib::Client client("127.0.0.1", metrics_port);
  return kernelrl::testing::WaitFor(
      [&] {
        auto res = client.Get("/metrics");
        if (!res || res->status != 200) return false;
        for (const auto& [series, value] : kernelrl::testing::ParseScrape(res->body)) {
          if (absl::StartsWith(series, "kernelrl_grpc_server_in_flight{") && value >= want) return true;
        }
        return false;
      },
      absl::Seconds(seconds), kernelrl::RealClock(), absl::Milliseconds(20));
}

class ServiceLifecycleTest : public ::testing::TestWithParam<Binary> {
 protected:
  // What this binary needs on a machine without a GPU, besides the server settings.
  std::vector<std::string> BinaryArgs() const {
    std::vector<std::string> args = GetParam().cpu_args;
    if (std::string(GetParam().name) == "actor") {
      args.push_back("--set=tokenizer_path=" + ActorTokenizer());
      args.push_back("--set=rollout.workspace_root=" + TempDir() + "/actor_workspaces");
    }
    return args;
  }

  std::unique_ptr<Subprocess> Start(const std::string& tag, std::vector<std::string> extra = {}) {
    port_file_ = TempDir() + "/" + GetParam().name + "_" + tag + ".ports";
    std::remove(port_file_.c_str());
    std::vector<std::string> args = {"--set=server.grpc_port=0", "--set=server.metrics_port=0",
                                     "--set=server.port_file=" + port_file_,
                                     "--set=server.drain_seconds=" + std::to_string(kDrainS),
                                     "--set=server.grace_seconds=" + std::to_string(kGraceS)};
    const std::vector<std::string> own = BinaryArgs();
    args.insert(args.end(), own.begin(), own.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(GetParam().path, args, TempDir() + "/" + GetParam().name + "_" + tag + ".log");
  }

  HealthCheckResponse::ServingStatus Check(Health::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    HealthCheckResponse response;
    grpc::Status status = stub.Check(&context, HealthCheckRequest(), &response);
    return status.ok() ? response.status() : HealthCheckResponse::UNKNOWN;
  }

  std::string port_file_;
};

TEST_P(ServiceLifecycleTest, ServesHealthThenDrainsOnSigterm) {
  auto process = Start("drain");
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(ReadPortFile(port_file_, 20, &grpc_port, &metrics_port)) << process->Log();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials());
  auto health = Health::NewStub(channel);
  EXPECT_EQ(Check(*health), HealthCheckResponse::SERVING);

  // A call in flight across the signal: 2.5 s, longer than the drain, shorter than drain + grace.
  auto diagnostics = kernelrl::v1::Diagnostics::NewStub(channel);
  std::future<std::pair<grpc::Status, std::string>> in_flight = std::async(std::launch::async, [&] {
    grpc::ClientContext context;
    kernelrl::v1::PingRequest request;
    request.set_delay_ms(2500);
    request.set_payload("still here");
    kernelrl::v1::PingResponse response;
    grpc::Status status = diagnostics->Ping(&context, request, &response);
    return std::make_pair(status, response.payload());
  });
  ASSERT_TRUE(InFlightWithin(metrics_port, 1, 20)) << "the call never reached the server\n" << process->Log();
  const auto signalled = std::chrono::steady_clock::now();
  process->Signal(SIGTERM);

  bool saw_not_serving = false;
  for (int i = 0; i < 40 && !saw_not_serving; ++i) {
    saw_not_serving = Check(*health) == HealthCheckResponse::NOT_SERVING;
    if (!saw_not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(saw_not_serving) << "health never reported NOT_SERVING during the drain";

  auto [status, payload] = in_flight.get();
  EXPECT_TRUE(status.ok()) << "in-flight call failed: " << status.error_message();
  EXPECT_EQ(payload, "still here");

  ASSERT_TRUE(process->Wait(kDrainS + kGraceS + 2)) << "did not exit within drain + grace";
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_EQ(process->exit_code(), 0) << process->Log();
  EXPECT_LE(elapsed, kDrainS + kGraceS + 1);
}

TEST_P(ServiceLifecycleTest, CallLongerThanGraceIsCutAndExitStaysClean) {
  auto process = Start("cut", {"--set=server.grace_seconds=1"});
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(ReadPortFile(port_file_, 20, &grpc_port, &metrics_port)) << process->Log();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials());
  auto diagnostics = kernelrl::v1::Diagnostics::NewStub(channel);
  std::future<grpc::Status> in_flight = std::async(std::launch::async, [&] {
    grpc::ClientContext context;
    kernelrl::v1::PingRequest request;
    request.set_delay_ms(30000);
    kernelrl::v1::PingResponse response;
    return diagnostics->Ping(&context, request, &response);
  });
  ASSERT_TRUE(InFlightWithin(metrics_port, 1, 20)) << "the call never reached the server\n" << process->Log();
  const auto signalled = std::chrono::steady_clock::now();
  process->Signal(SIGTERM);
  ASSERT_TRUE(process->Wait(kDrainS + 1 + 3)) << process->Log();
  EXPECT_EQ(process->exit_code(), 0) << process->Log();
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count(), kDrainS + 1 + 1.5);
  EXPECT_FALSE(in_flight.get().ok());
}

// One line on stderr, naming the problem, exit code 2.
void ExpectConfigError(const Binary& binary, const std::vector<std::string>& args, const std::string& needle) {
  const std::string log = TempDir() + "/" + binary.name + "_badcfg.log";
  Subprocess process(binary.path, args, log);
  ASSERT_TRUE(process.Wait(10));
  EXPECT_EQ(process.exit_code(), 2) << process.Log();
  const std::string text = process.Log();
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 1u) << text;
  EXPECT_NE(text.find(needle), std::string::npos) << text;
  EXPECT_NE(text.find(std::string(binary.name) + ": bad configuration"), std::string::npos) << text;
}

TEST_P(ServiceLifecycleTest, BadConfigIsOneClearLineAndExit2) {
  const std::string bad_file = TempDir() + "/" + GetParam().name + "_bad.textproto";
  {
    FILE* f = std::fopen(bad_file.c_str(), "w");
    std::fputs("server {\n  grpc_port: 1\n  colour: \"blue\"\n}\n", f);
    std::fclose(f);
  }
  ExpectConfigError(GetParam(), {"--config=" + bad_file}, bad_file + ":3:");
  ExpectConfigError(GetParam(), {"--set=server.grpc_port=123456"}, "outside 0..65535");
  ExpectConfigError(GetParam(), {"--config=/no/such/config.textproto"}, "/no/such/config.textproto");
  ExpectConfigError(GetParam(), {"--frobnicate"}, "unknown flag");
}

TEST_P(ServiceLifecycleTest, PortInUseFailsWithExit1) {
  auto first = Start("first");
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(ReadPortFile(port_file_, 20, &grpc_port, &metrics_port)) << first->Log();
  std::vector<std::string> args = BinaryArgs();
  args.push_back("--set=server.grpc_port=" + std::to_string(grpc_port));
  Subprocess second(GetParam().path, args,
                    TempDir() + "/" + GetParam().name + "_clash.log");
  ASSERT_TRUE(second.Wait(60));  // A bound for a failure: a sandbox worker sets up for seconds before it binds.
  EXPECT_EQ(second.exit_code(), 1);
  EXPECT_NE(second.Log().find("cannot start: cannot listen for gRPC"), std::string::npos) << second.Log();
}

// The job API validates on submit: a bad spec is INVALID_ARGUMENT naming the field, never a job.
TEST(LearnerJobApiTest, BadSpecIsInvalidArgumentNamingTheField) {
  const std::string port_file = TempDir() + "/learner_unimpl.ports";
  std::remove(port_file.c_str());
  Subprocess process("learner/learner_main",
                     {"--set=server.grpc_port=0", "--set=server.metrics_port=-1", "--set=server.port_file=" + port_file,
                      "--set=server.drain_seconds=0", "--set=state_dir=" + TempDir() + "/learner_state"},
                     TempDir() + "/learner_unimpl.log");
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(ReadPortFile(port_file, 20, &grpc_port, &metrics_port)) << process.Log();
  EXPECT_EQ(metrics_port, -1);  // metrics disabled by config
  auto stub = kernelrl::v1::Learner::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  kernelrl::v1::SubmitJobRequest request;
  request.mutable_spec()->set_name("probe");
  kernelrl::v1::Job job;
  const grpc::Status status = stub->SubmitJob(&context, request, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("base_checkpoint"), std::string::npos) << status.error_message();
  process.Signal(SIGTERM);
  ASSERT_TRUE(process.Wait(10));
  EXPECT_EQ(process.exit_code(), 0);
}

// Health follows the service's own health source (RunServiceMain `healthy`),
// both ways, on grpc.health.v1.
TEST(HealthSourceTest, HealthFollowsTheCore) {
  const std::string port_file = TempDir() + "/health_source.ports";
  const std::string unhealthy = TempDir() + "/health_source.unhealthy";
  std::remove(port_file.c_str());
  std::remove(unhealthy.c_str());
  setenv("KERNELRL_UNHEALTHY_FILE", unhealthy.c_str(), 1);
  Subprocess process("tests/health_source_main",
                     {"--set=server.grpc_port=0", "--set=server.metrics_port=-1", "--set=server.port_file=" + port_file},
                     TempDir() + "/health_source.log");
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(ReadPortFile(port_file, 20, &grpc_port, &metrics_port)) << process.Log();
  auto health = Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials()));
  auto status_within = [&](HealthCheckResponse::ServingStatus want, double seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      grpc::ClientContext context;
      HealthCheckResponse response;
      if (health->Check(&context, HealthCheckRequest(), &response).ok() && response.status() == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  EXPECT_TRUE(status_within(HealthCheckResponse::SERVING, 3));
  { FILE* f = std::fopen(unhealthy.c_str(), "w"); std::fclose(f); }
  EXPECT_TRUE(status_within(HealthCheckResponse::NOT_SERVING, 3)) << process.Log();
  std::remove(unhealthy.c_str());
  EXPECT_TRUE(status_within(HealthCheckResponse::SERVING, 3)) << process.Log();
  process.Signal(SIGTERM);
  ASSERT_TRUE(process.Wait(10));
  EXPECT_EQ(process.exit_code(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllBinaries, ServiceLifecycleTest,
                         ::testing::Values(Binary{"learner", "learner/learner_main"},
                                           Binary{"actor", "actor/actor_main"},
                                           Binary{"sandbox", "sandbox/sandbox_main", {"--set=backend=cpu"}}),
                         [](const ::testing::TestParamInfo<Binary>& info) { return info.param.name; });

}  // namespace
}  // namespace kernelrl
