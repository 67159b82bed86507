// One engine replica in its own process: serves kernelrl.v1.Policy (plus
// health, diagnostics and /metrics, common/service.h) and takes every
// committed version from the learner over NCCL, no disk
// (learner/sync/replica_weight_sync.h). Start one per GPU, on any host, with
// indices 0..N-1, and give the learner `policy.remote_replicas { count: N
// rendezvous: ... }`; actors balance over every replica's address.
// Configuration: kernelrl.v1.PolicyReplicaConfig (proto/learner_config.proto).
#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/service.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/tcp_address.h"
#include "learner/policy/engine_metrics.h"
#include "learner/policy_service.h"
#include "learner/sync/replica_weight_sync.h"
#include "proto/learner_config.pb.h"

namespace {
constexpr char kDefaults[] = R"pb(
  server { listen_address: "0.0.0.0" grpc_port: 50061 metrics_port: 9111 drain_seconds: 2 grace_seconds: 30 }
  policy { device: "cuda:0" }
)pb";
}  // namespace

int main(int argc, char** argv) {
  namespace learner = kernelrl::learner;
  kernelrl::v1::PolicyReplicaConfig config;
  std::unique_ptr<learner::PolicyEngine> engine;
  std::unique_ptr<learner::EngineMetrics> metrics;  // Detached before the engine goes.
  std::unique_ptr<learner::PolicyService> service;
  std::unique_ptr<learner::dist::DataParallel> sync;
  std::atomic<bool> stop{false};
  std::atomic<bool> receiving{false};
  std::thread receiver;
  const int rc = kernelrl::RunServiceMain(
      argc, argv, "policy_replica", kDefaults, &config, config.mutable_server(),
      [&]() -> absl::StatusOr<std::vector<grpc::Service*>> {
        const std::string& device = config.policy().device();
        if (!absl::StartsWith(device, "cuda:")) {
          return absl::InvalidArgumentError(
              absl::StrCat("policy.device \"", device, "\": a replica takes weights over NCCL, on cuda:N"));
        }
        if (config.replicas() < 1 || config.index() < 0 || config.index() >= config.replicas()) {
          return absl::InvalidArgumentError(absl::StrCat("index ", config.index(), " of ", config.replicas(),
                                                         " replicas: indices are 0..replicas-1"));
        }
        const int rank = config.index() + 1;  // The learner is rank 0.
        if (auto at = learner::dist::ParseTcpAddress(
                config.rendezvous(), "rendezvous (the learner's policy.remote_replicas.rendezvous)");
            !at.ok()) {
          return at.status();
        }
        auto e = learner::MakePolicyEngine(config.policy());
        if (!e.ok()) return e.status();
        engine = std::move(*e);
        metrics = std::make_unique<learner::EngineMetrics>(engine.get(), &kernelrl::DefaultRegistry());
        const absl::Duration timeout = absl::Seconds(config.timeout_seconds() > 0 ? config.timeout_seconds() : 600);
        // What the engine serves in: received versions are converted to it.
        auto serving = learner::ModelOptionsFor(device, config.policy().dtype());
        if (!serving.ok()) return serving.status();
        KLOG(INFO) << "policy replica " << config.index() << ": joining the learner's sync group at "
                   << config.rendezvous();
        auto s = learner::dist::DataParallel::ConnectNccl(
            {rank, config.replicas() + 1, config.rendezvous(), timeout}, serving->device.index());
        if (!s.ok()) return s.status();
        sync = std::move(*s);
        receiving = true;
        receiver = std::thread([&, serving = *serving] {
          learner::ReplicaWeightReceiver r(sync.get(), serving,
                                           [&](std::unique_ptr<learner::Transformer> m, int64_t v) {
                                             engine->SwapWeights(std::move(m), v, absl::StrCat("c10d:version-", v));
                                           });
          if (auto st = r.Run(stop); !st.ok()) {
            KLOG(ERROR) << "policy replica " << config.index() << ": weight sync stopped: " << st
                        << "; serving version " << engine->GetInfo().policy_version << " from now on";
          } else {
            KLOG(INFO) << "policy replica " << config.index() << ": the learner ended the weight sync";
          }
          receiving = false;
        });
        service = std::make_unique<learner::PolicyService>(engine.get());
        return std::vector<grpc::Service*>{service.get()};
      },
      // Unhealthy once the weight sync has stopped: this replica's versions only age.
      [&] { return receiving.load(); });
  stop = true;
  if (receiver.joinable()) receiver.join();
  return rc;
}
