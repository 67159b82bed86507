// GPU benchmark of weight sync without disk (learner/sync/collective_weight_sync.h):
// a policy of one shape (random init, bf16 compute, fp32 master shards)
// sharded over L learner GPUs, sent to R engine replicas over
// ProcessGroupNCCL. One process per learner rank (GPU 0..L-1) and per
// replica (GPU 1..R: NCCL wants distinct GPUs within the sync group, whose
// rank 0 is learner rank 0 on GPU 0), so replicas share GPUs with learner
// ranks, as colocated rollout and training do.
//
//   weight_sync_bench run <shape> <learner_gpus> <replicas> <rounds>
//       per round, after a barrier of both groups: the learner all-gathers
//       every unit and sends it, each replica receives and assembles its
//       model; one JSON line per round: GiB sent, the learner's send time
//       and the slowest replica's receive time (each up to
//       device_synchronize), GB/s. Round 1 includes NCCL's connection setup.
//   weight_sync_bench smoke
//       the same path on the CPU (tiny shape, 2 learner ranks, 1 replica,
//       the test store backend): a check before spending GPU time.
//
// Shapes: learner/bench/shapes.h.
#include <c10/cuda/CUDAFunctions.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "learner/bench/shapes.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/fsdp.h"
#include "learner/dist/launcher.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/model.h"
#include "learner/sync/collective_weight_sync.h"

namespace kernelrl::learner::bench {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Setup {
  std::string shape;
  int learners = 2, replicas = 1, rounds = 1;
  bool cpu = false;
};

absl::StatusOr<std::unique_ptr<dist::DataParallel>> Connect(const Setup& s, const std::string& store, int rank,
                                                            int world, int gpu) {
  dist::Rendezvous r{rank, world, store, absl::Minutes(5)};
  if (!s.cpu) return dist::DataParallel::ConnectNccl(r, gpu);
  return dist::DataParallel::Connect(r, at::kCPU, [](auto st, int rk, int n) {
    return c10::make_intrusive<dist::StoreBackendForTest>(st, rk, n);
  });
}

void Sync(const Setup& s) {
  if (!s.cpu) c10::cuda::device_synchronize();
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "weight_sync_bench: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);  // The other processes die with rank 0 (launcher) or time out in a collective.
}

// Learner rank `rank`: shards the policy, sends it `rounds` times.
int Learner(const Setup& s, const std::string& dir, int rank) {
  const at::Device device = s.cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, rank);
  const at::ScalarType dtype = s.cpu ? at::kFloat : at::kBFloat16;
  auto train = Connect(s, "file://" + dir + "/train", rank, s.learners, rank);
  if (!train.ok()) return Fail(train.status().ToString());
  std::unique_ptr<dist::DataParallel> sync;
  if (rank == 0) {
    auto x = Connect(s, "file://" + dir + "/sync", 0, 1 + s.replicas, 0);
    if (!x.ok()) return Fail(x.status().ToString());
    sync = std::move(*x);
  }
  ModelOptions o;
  o.device = device;
  o.draw_on_device = true;
  o.dtype = dtype;
  o.trainable = true;
  const double t0 = Now();
  auto model = Transformer::Create(Shape(s.shape), Head::kLanguageModel, o, 1);
  if (!model.ok()) return Fail(model.status().ToString());
  auto weights = dist::ShardedWeights::Shard(**model, (*train)->backend(), device, dtype);
  if (!weights.ok()) return Fail(weights.status().ToString());
  const double setup_s = Now() - t0;
  double bytes = 0;
  for (int64_t u = 0; u < (*weights)->unit_count(); ++u) {
    bytes += static_cast<double>((*weights)->unit_numel(u)) * at::elementSize(dtype);
  }
  for (int round = 1; round <= s.rounds; ++round) {
    if (auto st = (*train)->Barrier(); !st.ok()) return Fail(st.ToString());
    if (sync) {
      if (auto st = sync->Barrier(); !st.ok()) return Fail(st.ToString());
    }
    Sync(s);
    const double a = Now();
    if (auto st = SendWeights(**weights, sync ? sync->backend().get() : nullptr, round); !st.ok()) {
      return Fail(st.ToString());
    }
    Sync(s);
    const double send_s = Now() - a;
    if (rank != 0) continue;
    double slowest = 0;
    for (int j = 1; j <= s.replicas; ++j) {
      auto v = sync->StoreGet(absl::StrCat("replica", j, "/round", round), absl::Minutes(5));
      double t = 0;
      if (!v.ok() || !absl::SimpleAtod(*v, &t)) return Fail(absl::StrCat("replica ", j, " reported no time"));
      slowest = std::max(slowest, t);
    }
    const double wall = std::max(send_s, slowest);
    std::printf(
        "{\"bench\": \"weight_sync\", \"shape\": \"%s\", \"learner_gpus\": %d, \"replicas\": %d, \"round\": %d, "
        "\"bytes\": %.0f, \"gib\": %.2f, \"send_s\": %.3f, \"replica_max_s\": %.3f, \"gb_per_s\": %.1f, \"setup_s\": %.1f, "
        "\"device\": \"%s\"}\n",
        s.shape.c_str(), s.learners, s.replicas, round, bytes, bytes / (1 << 30), send_s, slowest, bytes / wall / 1e9,
        setup_s, s.cpu ? "cpu" : "cuda");
    std::fflush(stdout);
  }
  return 0;
}

// Replica j (1..R) on GPU j: receives `rounds` versions.
int Replica(const Setup& s, const std::string& dir, int j) {
  auto sync = Connect(s, "file://" + dir + "/sync", j, 1 + s.replicas, j);
  if (!sync.ok()) return Fail(sync.status().ToString());
  ModelOptions o;
  o.device = s.cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, j);
  o.dtype = s.cpu ? at::kFloat : at::kBFloat16;
  for (int round = 1; round <= s.rounds; ++round) {
    if (auto st = (*sync)->Barrier(); !st.ok()) return Fail(st.ToString());
    Sync(s);
    const double a = Now();
    auto got = ReceiveWeights(*(*sync)->backend(), o);
    if (!got.ok()) return Fail(got.status().ToString());
    Sync(s);
    const double t = Now() - a;
    if (got->policy_version != round) return Fail(absl::StrCat("received version ", got->policy_version));
    if (auto st = (*sync)->StoreSet(absl::StrCat("replica", j, "/round", round), absl::StrCat(t)); !st.ok()) {
      return Fail(st.ToString());
    }
  }
  return 0;
}

int Run(const Setup& s, const std::vector<std::string>& args, const dist::RankFlags& flags) {
  const int world = s.learners + s.replicas;
  if (s.replicas < 1 || s.learners < 1 || s.rounds < 1) return Fail("learner_gpus, replicas and rounds must be >= 1");
  std::string dir = flags.rendezvous;
  std::vector<pid_t> pids;
  if (flags.rank == 0) {
    if (!s.cpu && c10::cuda::device_count() < std::max(s.learners, s.replicas + 1)) {
      return Fail(absl::StrCat("this machine has ", c10::cuda::device_count(), " GPUs"));
    }
    char tmpl[] = "/tmp/weight_sync_bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Fail("mkdtemp");
    dir = tmpl;
    auto p = dist::SpawnRanks(args, world, dir);
    if (!p.ok()) return Fail(p.status().ToString());
    pids = *p;
  }
  const int rc = flags.rank < s.learners ? Learner(s, dir, flags.rank) : Replica(s, dir, flags.rank - s.learners + 1);
  if (flags.rank == 0) {
    if (auto st = dist::WaitRanks(pids); !st.ok()) return Fail(st.ToString());
    (void)RemoveTree(dir);  // The FileStores.
  }
  return rc;
}

}  // namespace
}  // namespace kernelrl::learner::bench

int main(int argc, char** argv) {
  namespace b = kernelrl::learner::bench;
  auto flags = kernelrl::learner::dist::TakeRankFlags(&argc, argv);
  if (!flags.ok()) return std::fprintf(stderr, "%s\n", flags.status().ToString().c_str()), 2;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "run" && argc == 6) {
    b::Setup s{argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), false};
    return b::Run(s, {"run", argv[2], argv[3], argv[4], argv[5]}, *flags);
  }
  if (mode == "smoke" && argc == 2) return b::Run(b::Setup{"tiny", 2, 1, 2, true}, {"smoke"}, *flags);
  std::fprintf(stderr, "usage: weight_sync_bench run <shape> <learner_gpus> <replicas> <rounds> | smoke\n");
  return 2;
}
