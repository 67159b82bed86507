// The learner binary: serves kernelrl.v1.Learner (jobs, task leases,
// trajectory ingest) and, when enabled, kernelrl.v1.Policy (and the same
// engine over the OpenAI-compatible HTTP API), plus health,
// diagnostics and /metrics (common/service.h). Configuration:
// proto/learner_config.proto.
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAFunctions.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/service.h"
#include "grpcpp/grpcpp.h"
#include "learner/learner_service.h"
#include "learner/model.h"
#include "learner/policy/engine_metrics.h"
#include "learner/policy/openai_server.h"
#include "learner/dist/tcp_address.h"
#include "learner/policy_service.h"
#include "learner/sync/external_weight_sync.h"
#include "learner/sync/replica_weight_sync.h"
#include "learner/sync/weight_sink.h"
#include "learner/rl/dp_job.h"
#include "learner/rl/jobs.h"
#include "learner/rl/learner_group.h"
#include "learner/rl/recipe.h"
#include "proto/learner_config.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "127.0.0.1" grpc_port: 50051 metrics_port: 9101 drain_seconds: 2 grace_seconds: 30 }
  state_dir: "/var/lib/kernelrl/learner"
)pb";
// policy.remote_replicas: hosts the sync group's store at its rendezvous and
// joins as rank 0 on a CUDA device (ProcessGroupNCCL), waiting for every
// replica (policy_replica_main) to join.
absl::StatusOr<std::unique_ptr<kernelrl::learner::WeightSink>> ConnectRemoteReplicas(
    const kernelrl::v1::PolicyServerConfig& policy) {
  namespace dist = kernelrl::learner::dist;
  const kernelrl::v1::RemotePolicyReplicas& r = policy.remote_replicas();
  if (c10::cuda::device_count() == 0) {
    return absl::FailedPreconditionError(
        "policy.remote_replicas: no CUDA device here; replicas take each version over NCCL from a GPU");
  }
  const absl::Duration timeout = absl::Seconds(r.timeout_seconds() > 0 ? r.timeout_seconds() : 600);
  const std::string device =
      !r.device().empty() ? r.device() : absl::StartsWith(policy.device(), "cuda:") ? policy.device() : "cuda:0";
  if (!absl::StartsWith(device, "cuda:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.remote_replicas.device \"", device, "\": replicas take weights over NCCL, from cuda:N"));
  }
  int cuda = 0;
  if (!absl::SimpleAtoi(device.substr(5), &cuda)) {
    return absl::InvalidArgumentError(absl::StrCat("policy.remote_replicas.device \"", device, "\""));
  }
  auto at = dist::ParseTcpAddress(r.rendezvous(), "policy.remote_replicas.rendezvous (the learner hosts it)");
  if (!at.ok()) return at.status();
  auto hosted = dist::DataParallel::HostTcpStore(at->host, at->port, timeout);
  if (!hosted.ok()) return hosted.status();
  KLOG(INFO) << "policy replicas: waiting for " << r.count() << " to join at " << *hosted;
  auto sync = dist::DataParallel::ConnectNccl({0, 1 + r.count(), *hosted, timeout}, cuda);
  if (!sync.ok()) return sync.status();
  kernelrl::learner::CollectiveWeightSink::Options o;
  o.wire_device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda));
  o.wire_dtype = at::kBFloat16;
  o.ack_timeout = timeout;
  return std::make_unique<kernelrl::learner::CollectiveWeightSink>(std::move(*sync), o);
}

}  // namespace

int main(int argc, char** argv) {
  // The learner group (LearnerConfig.distributed; docs/LEARNER.md): global
  // rank 0 serves and leads; every other rank only trains.
  kernelrl::BlockTerminationSignals();  // Before the rendezvous starts threads.
  kernelrl::learner::rl::LearnerGroup group;
  if (auto rc = kernelrl::learner::rl::JoinLearnerGroup(&argc, argv, kDefaults, &group)) return *rc;
  if (group.follower_host()) return kernelrl::learner::rl::ServeFollowerHost(argc, argv, kDefaults, &group);
  std::unique_ptr<kernelrl::learner::rl::DpLeader> dp_leader;
  if (group.dp) dp_leader = std::make_unique<kernelrl::learner::rl::DpLeader>(group.dp.get(), group.sharding);
  kernelrl::v1::LearnerConfig config;
  // kernelrl.v1.Policy, when `policy { enabled: true model_path: ... }`;
  // each committed policy version is hot-swapped into it.
  std::unique_ptr<kernelrl::learner::PolicyEngine> engine;
  std::unique_ptr<kernelrl::learner::EngineMetrics> engine_metrics;  // Detached before the engine goes.
  std::unique_ptr<kernelrl::learner::PolicyService> policy_service;
  std::unique_ptr<kernelrl::learner::OpenAIServer> openai_server;  // Stopped before the engine goes.
  // policy.replica_devices: one engine and one kernelrl.v1.Policy server each.
  std::vector<std::unique_ptr<kernelrl::learner::PolicyEngine>> replica_engines;
  std::vector<std::unique_ptr<kernelrl::learner::PolicyService>> replica_services;
  std::vector<std::unique_ptr<grpc::Server>> replica_servers;  // Shut down before the engines go.
  // Where each committed version goes: external servers when configured,
  // else the built-in engine (if any); and replicas in other processes.
  std::unique_ptr<kernelrl::learner::WeightSink> weight_sink;
  std::unique_ptr<kernelrl::learner::rl::LearnerMetrics> learner_metrics;  // Outlives the jobs.
  std::unique_ptr<kernelrl::learner::rl::JobManager> jobs;
  std::unique_ptr<kernelrl::learner::LearnerService> learner_service;
  const int rc = kernelrl::RunServiceMain(
      argc, argv, "learner", kDefaults, &config, config.mutable_server(),
      [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
        std::vector<grpc::Service*> services;
        if (config.cpu_threads() > 0) at::set_num_threads(config.cpu_threads());
        kernelrl::learner::AllowCudnnAttention(config.sdpa_cudnn());
        if (config.policy().enabled()) {
          auto e = kernelrl::learner::MakePolicyEngine(config.policy(), config.gpu_lease_path());
          if (!e.ok()) return e.status();
          engine = std::move(*e);
          engine_metrics = std::make_unique<kernelrl::learner::EngineMetrics>(engine.get(), &kernelrl::DefaultRegistry());
          policy_service = std::make_unique<kernelrl::learner::PolicyService>(engine.get());
          services.push_back(policy_service.get());
          if (config.policy().openai_enabled()) {  // The same engine over OpenAI's HTTP API.
            auto o = kernelrl::learner::OpenAIServer::StartFromConfig(config.policy(), config.server().listen_address(),
                                                                      engine.get());
            if (!o.ok()) return o.status();
            openai_server = std::move(*o);
          }
        }
        for (int i = 0; engine != nullptr && i < config.policy().replica_devices_size(); ++i) {
          kernelrl::v1::PolicyServerConfig rc = config.policy();
          rc.set_device(config.policy().replica_devices(i));
          auto e = kernelrl::learner::MakePolicyEngine(rc);
          if (!e.ok()) return e.status();
          replica_engines.push_back(std::move(*e));
          replica_services.push_back(std::make_unique<kernelrl::learner::PolicyService>(replica_engines.back().get()));
          const int want = i < config.policy().replica_ports_size() ? config.policy().replica_ports(i) : 0;
          int port = 0;
          grpc::ServerBuilder b;
          b.AddListeningPort(absl::StrCat(config.server().listen_address(), ":", want),
                             grpc::InsecureServerCredentials(), &port);
          b.RegisterService(replica_services.back().get());
          replica_servers.push_back(b.BuildAndStart());
          if (replica_servers.back() == nullptr || port == 0) {
            return absl::UnavailableError(absl::StrCat("policy replica ", i + 1, ": cannot serve on port ", want));
          }
          KLOG(INFO) << "policy replica " << i + 1 << " on " << rc.device() << " serving kernelrl.v1.Policy on "
                     << config.server().listen_address() << ":" << port;
        }
        std::vector<std::unique_ptr<kernelrl::learner::WeightSink>> sinks;
        if (!config.policy().external().addresses().empty()) {
          auto x = kernelrl::learner::ExternalWeightSync::Create(config.policy().external());
          if (!x.ok()) return x.status();
          sinks.push_back(std::move(*x));
        } else if (engine != nullptr) {
          std::vector<kernelrl::learner::PolicyEngine*> all = {engine.get()};
          for (auto& r : replica_engines) all.push_back(r.get());
          sinks.push_back(std::make_unique<kernelrl::learner::EngineWeightSink>(std::move(all)));
        }
        if (config.policy().remote_replicas().count() > 0) {
          auto remote = ConnectRemoteReplicas(config.policy());
          if (!remote.ok()) return remote.status();
          sinks.push_back(std::move(*remote));
        }
        if (sinks.size() == 1) {
          weight_sink = std::move(sinks.front());
        } else if (!sinks.empty()) {
          weight_sink = std::make_unique<kernelrl::learner::WeightSinks>(std::move(sinks));
        }
        auto* sink_ptr = weight_sink.get();
        learner_metrics = std::make_unique<kernelrl::learner::rl::LearnerMetrics>(&kernelrl::DefaultRegistry());
        auto* metrics_ptr = learner_metrics.get();
        auto m = kernelrl::learner::rl::JobManager::Open(
            config.state_dir(),
            [sink_ptr, metrics_ptr, leader = dp_leader.get(), lease = config.gpu_lease_path()] {
              return kernelrl::learner::rl::MakeRecipeRunner(sink_ptr, metrics_ptr, leader, lease);
            },
            metrics_ptr);
        if (!m.ok()) return m.status();
        jobs = std::move(*m);
        learner_service = std::make_unique<kernelrl::learner::LearnerService>(jobs.get());
        services.push_back(learner_service.get());
        return services;
      });
  for (auto& s : replica_servers) s->Shutdown();
  jobs.reset();  // The running job stops and releases the ranks' trainers.
  kernelrl::learner::rl::LeaveLearnerGroup(dp_leader.get(), &group);
  return rc;
}
