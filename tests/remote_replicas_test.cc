// policy_replica_main, the engine replica in its own process.
//
// CPU (CI): configurations it cannot serve are refused at start, saying why;
// so is a learner asked for remote replicas on a machine without CUDA.
// GPU (KERNELRL_TEST_REPLICA_GPUS=2 on a machine with two GPUs; fails with
// fewer): a replica process on cuda:1 joins this process's sync group (the
// learner's side, CollectiveWeightSink, rank 0 on cuda:0, over NCCL); after
// each publication returns, the replica's Policy server reports the version
// and stamps a generation with it; the learner's end stops its receiver and
// the replica reports unhealthy. Its greedy tokens (CUDA-graph decode on
// cuda:1) equal those of the same engine on cuda:0 in this process.
// Without the variable the GPU case skips, saying so: two ranks need two
// GPUs (NCCL refuses two ranks on one).
#include <unistd.h>

#include <c10/cuda/CUDAFunctions.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/gpu_presence.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "learner/dist/data_parallel.h"
#include "google/protobuf/text_format.h"
#include "learner/model.h"
#include "learner/policy_service.h"
#include "learner/sync/replica_weight_sync.h"
#include "learner/test_util.h"
#include "proto/policy.grpc.pb.h"
#include "tests/subprocess.h"

namespace kernelrl {
namespace {

std::string ReplicaBinary() { return "learner/policy_replica_main"; }

std::string WriteConfig(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/replica.textproto";
  std::ofstream(path) << text;
  return path;
}

// Starts the replica with `config_text`; expects it to exit non-zero with `why` in its log.
void ExpectRefused(const std::string& config_text, const std::string& why) {
  const std::string dir = testing::NewTempDir("replica_refused_");
  testing::Subprocess p(ReplicaBinary(), {"--config=" + WriteConfig(dir, config_text)}, dir + "/replica.log");
  ASSERT_TRUE(p.Wait(60)) << "still running: " << p.Log();
  EXPECT_NE(p.exit_code(), 0) << p.Log();
  EXPECT_NE(p.Log().find(why), std::string::npos) << "log does not say \"" << why << "\":\n" << p.Log();
}

TEST(RemoteReplicasTest, ConfigurationsItCannotServeAreRefusedSayingWhy) {
  const std::string ports = "server { grpc_port: 0 metrics_port: 0 } ";
  ExpectRefused(ports + R"(policy { model_path: "/nonexistent" device: "cpu" }
                           rendezvous: "tcp://127.0.0.1:1" index: 0 replicas: 1)",
                "a replica takes weights over NCCL, on cuda:N");
  ExpectRefused(ports + R"(policy { model_path: "/nonexistent" device: "cuda:0" }
                           rendezvous: "tcp://127.0.0.1:1" index: 2 replicas: 2)",
                "indices are 0..replicas-1");
  ExpectRefused(ports + R"(policy { model_path: "/nonexistent" device: "cuda:0" }
                           rendezvous: "file:///tmp/x" index: 0 replicas: 1)",
                "rendezvous (the learner's policy.remote_replicas.rendezvous) 'file:///tmp/x': expected tcp://HOST:PORT");
}

// The learner's side: on a machine without CUDA, policy.remote_replicas is
// refused at start, saying why (on a GPU machine it would wait for replicas).
TEST(RemoteReplicasTest, ALearnerWithoutCudaRefusesRemoteReplicas) {
  if (GpuDevicePresent()) GTEST_SKIP() << "this machine has a GPU: the learner would wait for its replicas";
  const std::string dir = testing::NewTempDir("replica_learner_");
  testing::Subprocess learner("learner/learner_main",
                              {"--set=server.grpc_port=0", "--set=server.metrics_port=-1", "--set=state_dir=" + dir,
                               "--set=policy.remote_replicas.count=1",
                               "--set=policy.remote_replicas.rendezvous=tcp://127.0.0.1:29600"},
                              dir + "/learner.log");
  ASSERT_TRUE(learner.Wait(60)) << "still running: " << learner.Log();
  EXPECT_NE(learner.exit_code(), 0) << learner.Log();
  EXPECT_NE(learner.Log().find("policy.remote_replicas: no CUDA device here"), std::string::npos) << learner.Log();
}

// A collective that never completes blocks without a timeout of its own:
// past `seconds`, print the step reached and the replica's log, and exit.
class Watchdog {
 public:
  Watchdog(int seconds, const std::string& replica_log)
      : thread_([this, seconds, replica_log] {
          if (done_.WaitForNotificationWithTimeout(absl::Seconds(seconds))) return;
          std::ifstream in(replica_log);
          const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
          std::fprintf(stderr, "still running after %d s, at: %s\nthe replica's log:\n%s\n", seconds,
                       step_.load(), log.c_str());
          std::fflush(stderr);
          std::_Exit(1);
        }) {}
  ~Watchdog() {
    done_.Notify();
    thread_.join();
  }
  void Step(const char* what) {
    step_ = what;
    std::fprintf(stderr, "[step] %s\n", what);
  }

 private:
  absl::Notification done_;
  std::atomic<const char*> step_{"start"};
  std::thread thread_;
};

TEST(RemoteReplicasGpuTest, AReplicaProcessServesEachVersionOverNccl) {
  const char* asked = std::getenv("KERNELRL_TEST_REPLICA_GPUS");
  if (asked == nullptr) {
    GTEST_SKIP() << (GpuDevicePresent() ? "KERNELRL_TEST_REPLICA_GPUS is not set" : "no GPU on this machine")
                 << ": the replica test needs two GPUs (tools/device_weight_sync.sh runs it)";
  }
  ASSERT_GE(c10::cuda::device_count(), 2) << "asked for " << asked << " GPUs (KERNELRL_TEST_REPLICA_GPUS)";
  const std::string dir = testing::NewTempDir("replica_gpu_");
  learner::ModelOptions o;
  auto base = learner::Transformer::Create(learner::testing::TinyQwen2Config(32), learner::Head::kLanguageModel, o, 11);
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_TRUE((*base)->Save(dir + "/base").ok());

  auto hosted = learner::dist::DataParallel::HostTcpStore("127.0.0.1", 0, absl::Seconds(120));
  ASSERT_TRUE(hosted.ok()) << hosted.status();
  auto policy_on = [&](const std::string& device) {
    return absl::StrCat("policy { model_path: \"", dir, "/base\" device: \"", device,
                        "\" max_batch: 2 max_seq_len: 64 cuda_graph_decode: true }\n");
  };
  const std::string config =
      absl::StrCat("server { grpc_port: 0 metrics_port: 0 port_file: \"", dir, "/ports\" }\n", policy_on("cuda:1"),
                   "rendezvous: \"", *hosted, "\" index: 0 replicas: 1 timeout_seconds: 120\n");
  // The same engine on cuda:0 in this process, given each version directly:
  // the replica's greedy tokens must equal its tokens.
  v1::PolicyReplicaConfig local_config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(policy_on("cuda:0"), &local_config));
  auto local = learner::MakePolicyEngine(local_config.policy());
  ASSERT_TRUE(local.ok()) << local.status();
  testing::Subprocess replica(ReplicaBinary(), {"--config=" + WriteConfig(dir, config)}, dir + "/replica.log");
  Watchdog watchdog(240, dir + "/replica.log");
  watchdog.Step("joining the sync group (NCCL communicators)");
  auto sync = learner::dist::DataParallel::ConnectNccl({0, 2, *hosted, absl::Seconds(120)}, 0);
  ASSERT_TRUE(sync.ok()) << sync.status() << "\n" << replica.Log();
  watchdog.Step("waiting for the replica's port file");
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(testing::ReadPortFile(dir + "/ports", 120, &grpc_port, &metrics_port)) << replica.Log();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port), grpc::InsecureChannelCredentials());
  auto stub = v1::Policy::NewStub(channel);
  {
    learner::CollectiveWeightSink::Options so;
    so.wire_device = at::Device(at::kCUDA, 0);
    so.wire_dtype = at::kBFloat16;
    so.ack_timeout = absl::Seconds(120);
    learner::CollectiveWeightSink sink(std::move(*sync), so);
    for (int64_t version : {4, 5}) {
      auto policy = learner::Transformer::Create(learner::testing::TinyQwen2Config(32), learner::Head::kLanguageModel,
                                                 o, 100 + version);
      ASSERT_TRUE(policy.ok()) << policy.status();
      watchdog.Step("publishing a version (announce, broadcasts, acknowledgement)");
      const absl::Status published = sink.PublishModel(**policy, version);
      ASSERT_TRUE(published.ok()) << published << "\n" << replica.Log();
      watchdog.Step("asking the replica for its version and generations");
      grpc::ClientContext c1;
      v1::WeightVersion info;
      ASSERT_TRUE(stub->GetWeightVersion(&c1, v1::GetWeightVersionRequest(), &info).ok());
      EXPECT_EQ(info.policy_version(), version);
      ASSERT_TRUE((*local)->SwapWeightsFromModel(**policy, version).ok());
      learner::GenerationRequest mine;
      mine.prompt = {1, 5, 7};
      mine.sampling.temperature = 0;
      mine.sampling.max_new_tokens = 12;
      auto expected = (*local)->Generate(mine);
      ASSERT_TRUE(expected.ok()) << expected.status();
      v1::GenerateRequest req;
      for (int t : mine.prompt) req.add_prompt_ids(t);
      req.mutable_sampling()->set_temperature(0);
      req.mutable_sampling()->set_max_new_tokens(12);
      for (int call = 0; call < 2; ++call) {  // The second call replays the captured decode steps.
        grpc::ClientContext c2;
        v1::GenerateResponse resp;
        ASSERT_TRUE(stub->Generate(&c2, req, &resp).ok());
        EXPECT_EQ(resp.policy_version(), version) << replica.Log();
        const std::vector<int32_t> got(resp.output_ids().begin(), resp.output_ids().end());
        EXPECT_EQ(got, expected->output_ids) << "version " << version << ", call " << call;
      }
    }
    watchdog.Step("announcing the end");
  }  // The sink announces the end: the replica's receiver returns.
  watchdog.Step("stopping the replica");
  replica.Signal(SIGTERM);
  ASSERT_TRUE(replica.Wait(60)) << replica.Log();
  EXPECT_NE(replica.Log().find("the learner ended the weight sync"), std::string::npos) << replica.Log();
}

}  // namespace
}  // namespace kernelrl
