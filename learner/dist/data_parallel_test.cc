// Data-parallel training on c10d.
//  * CPU: the DP step of 2 ranks (threads; c10d FileStore rendezvous; the
//    store backend, see store_backend_for_test.h) gives the single-rank step's
//    losses, metrics, gradients and updated weights on the same global batch,
//    for PPO, RFT and value steps, including a rank with an empty shard.
//  * CPU: the launcher spawns ranks of this binary that meet rank 0 through
//    its TCPStore and reduce with it.
//  * GPU: the same PPO step over ProcessGroupNCCL, one process per GPU. Skipped
//    without a GPU; fails where a GPU is present but CUDA does not load, or
//    with fewer GPUs than asked (KERNELRL_TEST_DP_GPUS, default 2: DpTestGpus).
// This binary has its own main: a process started with --dp_rank > 0 is a
// rank of a test above, not a test run.
#include "learner/dist/data_parallel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAFunctions.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/gpu_presence.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "learner/dist/launcher.h"
#include "learner/dist/shard.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/rl/test_batch.h"
#include "learner/rl/trainer.h"
#include "learner/test_util.h"

namespace kernelrl::learner::dist {
namespace {

using rl::Sample;
using rl::testing::RandomBatch;
using rl::testing::ShardOf;
using rl::StepMetrics;
using rl::Trainer;
using rl::TrainerOptions;

ModelConfig TinyConfig() {
  return learner::testing::TinyQwen2Config(32);
}

std::unique_ptr<Transformer> Tiny(Head head, uint64_t seed, at::Device device) {
  ModelOptions o;
  o.trainable = true;
  o.device = device;
  o.dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  auto m = Transformer::Create(TinyConfig(), head, o, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

enum class Objective { kPpo, kSft, kValue };

absl::StatusOr<StepMetrics> RunStep(Trainer& t, Objective o, const std::vector<Sample>& b, int64_t n) {
  switch (o) {
    case Objective::kPpo: return t.PpoStep(b, n);
    case Objective::kSft: return t.SftStep(b, n);
    default: return t.ValueStep(b, n);
  }
}

struct StepResult {
  StepMetrics metrics;
  std::map<std::string, std::vector<at::Tensor>> grads;  // By model, after the reduction.
  std::vector<at::Tensor> weights;                      // After the optimizer step.
};

std::unique_ptr<Trainer> MakeTrainer(Objective o, at::Device device) {
  TrainerOptions opt;
  opt.max_tokens_per_row = 24;  // Several rows per rank: packing and accumulation too.
  opt.actor.lr = 1e-3, opt.critic.lr = 1e-3;
  // The replay (StepOn) applies gradients to a fresh trainer; the value head's
  // first-batch initialisation would happen on one side only.
  opt.value_head_init = false;
  // The batch's rollout log-probs are random: the mismatch mask would drop
  // every token of a one-trajectory batch (zero gradients, nothing compared).
  // The ratio is taken against those random log-probs too: no clipping, or a
  // one-trajectory batch can have every token clipped.
  opt.policy_loss.mismatch_mask = rl::MismatchMask::kOff;
  opt.policy_loss.clip_low = opt.policy_loss.clip_high = 1e9;
  opt.policy_loss.dual_clip = 0;
  // The KL penalty's metrics reduce like the rest (its first update's reference is the actor: 0).
  if (o == Objective::kPpo) opt.kl_ref_coef = 0.1;
  return std::make_unique<Trainer>(Tiny(Head::kLanguageModel, 5, device),
                                   o == Objective::kSft ? nullptr : Tiny(Head::kValue, 6, device), opt);
}

void Observe(Trainer& t, StepResult* r) {
  t.set_grad_observer([r](const std::string& model, const std::vector<at::Tensor>& grads) {
    for (const at::Tensor& g : grads) r->grads[model].push_back(g.detach().to(at::kCPU, at::kFloat).clone());
  });
}

std::vector<at::Tensor> Weights(Trainer& t) {
  std::vector<at::Tensor> w;
  for (const at::Tensor& p : t.policy().parameters()) w.push_back(p.detach().to(at::kCPU, at::kFloat).clone());
  if (t.critic() != nullptr) {
    for (const at::Tensor& p : t.critic()->parameters()) w.push_back(p.detach().to(at::kCPU, at::kFloat).clone());
  }
  return w;
}

// The weights after one optimizer step from MakeTrainer's initial state on
// exactly `grads` (by model, as the grad observer saw them). The observer sees
// the gradients AdamW::Step() then clips and applies, so replaying them on a
// fresh trainer gives that step's weights.
std::vector<at::Tensor> StepOn(Objective o, const std::map<std::string, std::vector<at::Tensor>>& grads) {
  auto t = MakeTrainer(o, at::kCPU);
  for (const auto& [model, g] : grads) {
    rl::AdamW& opt = model == "actor" ? t->actor_optimizer() : *t->critic_optimizer();
    for (size_t i = 0; i < g.size(); ++i) opt.params().at(i).mutable_grad() = g[i].clone();
    opt.Step();
  }
  return Weights(*t);
}

void ExpectSameWeights(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected, double rtol,
                       double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::allclose(actual[i], expected[i], rtol, atol))
        << what << ": weight " << i << " max diff " << (actual[i] - expected[i]).abs().max().item<double>();
  }
}

// Metrics and reduced gradients: dp's equal single's. Weights: dp's equal
// `expected`, the weights that dp's gradients should give (see the callers).
void ExpectSameStep(const StepResult& single, const StepResult& dp, const std::vector<at::Tensor>& expected,
                    double rtol, double atol, const char* what) {
  for (const auto& [k, v] : single.metrics) {
    // Timings differ; "rows" counts packed rows, and the shards pack differently from the whole batch.
    if (k == "step_seconds" || k == "tokens_per_second" || k == "rows") continue;
    ASSERT_TRUE(dp.metrics.count(k)) << what << ": DP lacks metric " << k;
    EXPECT_NEAR(dp.metrics.at(k), v, atol + rtol * std::abs(v)) << what << ": metric " << k;
  }
  EXPECT_EQ(dp.metrics.size(), single.metrics.size()) << what;
  ASSERT_EQ(dp.grads.size(), single.grads.size()) << what;
  for (const auto& [model, grads] : single.grads) {
    const auto& other = dp.grads.at(model);
    ASSERT_EQ(other.size(), grads.size());
    double max_abs = 0;
    for (const at::Tensor& g : grads) max_abs = std::max(max_abs, g.abs().max().item<double>());
    ASSERT_GT(max_abs, 0) << what << ": " << model << " gradients are all zero";
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(at::allclose(other[i], grads[i], rtol, atol * max_abs))
          << what << ": " << model << " grad " << i << " max diff " << (other[i] - grads[i]).abs().max().item<double>();
    }
  }
  ExpectSameWeights(dp.weights, expected, rtol, atol, what);
}

std::string TempPath(const std::string& name) {
  char tmpl[] = "/tmp/dp_test_XXXXXX";
  return std::string(mkdtemp(tmpl)) + "/" + name;
}

TEST(DataParallelTest, TwoRanksEqualOneRankOnTheGlobalBatch) {
  // KERNELRL_TEST_DP_SEED reruns one seed (printed below) of a failed run.
  const char* seed_env = std::getenv("KERNELRL_TEST_DP_SEED");
  const uint64_t seed = seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
  std::printf("batch seed %llu\n", static_cast<unsigned long long>(seed));
  for (Objective o : {Objective::kPpo, Objective::kSft, Objective::kValue}) {
    for (int n : {7, 1}) {  // n = 1: rank 1 has an empty shard.
      const std::string what = absl::StrCat("objective ", static_cast<int>(o), ", ", n, " trajectories");
      const std::vector<Sample> batch = RandomBatch(n, seed + n);
      StepResult single;
      {
        auto t = MakeTrainer(o, at::kCPU);
        Observe(*t, &single);
        auto m = RunStep(*t, o, batch, 0);
        ASSERT_TRUE(m.ok()) << m.status();
        single.metrics = *m;
        single.weights = Weights(*t);
      }
      const int world = 2;
      std::vector<std::unique_ptr<Trainer>> trainers;
      for (int r = 0; r < world; ++r) trainers.push_back(MakeTrainer(o, at::kCPU));
      StepResult dp[2];
      absl::Status status[2];
      const std::string store = "file://" + TempPath("store");
      std::vector<std::thread> ranks;
      for (int r = 0; r < world; ++r) {
        ranks.emplace_back([&, r] {
          Rendezvous rv{r, world, store, absl::Seconds(120)};
          auto c = DataParallel::Connect(rv, at::kCPU, [](auto store, int rank, int size) {
            return c10::make_intrusive<StoreBackendForTest>(store, rank, size);
          });
          if (!c.ok()) return void(status[r] = c.status());
          Trainer& t = *trainers[r];
          t.set_collectives(c->get());
          Observe(t, &dp[r]);
          auto m = RunStep(t, o, ShardOf(batch, r, world), n);
          if (!m.ok()) return void(status[r] = m.status());
          dp[r].metrics = *m;
          dp[r].weights = Weights(t);
        });
      }
      for (auto& th : ranks) th.join();
      // The weights are not compared with the single rank's: Adam's first
      // update is lr * g / (|g| + eps), ~lr * sign(g), so where a gradient
      // element is within its rounding error of 0 the shards' summation order
      // alone moves the weight by up to 2 lr (seed 3349102579 with AVX2
      // kernels). Instead the gradients are compared tightly, and each rank's
      // weights must be the optimizer step on its own reduced gradients.
      // Replaying the single rank's gradients must give its weights: the
      // replay is the trainer's step, so the oracle cannot drift from it.
      ExpectSameWeights(single.weights, StepOn(o, single.grads), 1e-4, 1e-6, what + ", replay");
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(status[r].ok()) << what << ": rank " << r << ": " << status[r];
        ExpectSameStep(single, dp[r], StepOn(o, dp[r].grads), 1e-4, 1e-6, what.c_str());
      }
      // The backend sums in rank order, so every rank gets bit-identical gradients: the ranks stay in step.
      for (size_t i = 0; i < dp[0].weights.size(); ++i) {
        EXPECT_TRUE(at::equal(dp[0].weights[i], dp[1].weights[i])) << what << ": ranks differ in weight " << i;
      }
    }
  }
}

TEST(DataParallelTest, BroadcastMakesEveryRankRankZerosWeights) {
  const int world = 2;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int r = 0; r < world; ++r) {
    trainers.push_back(std::make_unique<Trainer>(Tiny(Head::kLanguageModel, 100 + r, at::kCPU),
                                                 Tiny(Head::kValue, 200 + r, at::kCPU), TrainerOptions{}));
  }
  ASSERT_FALSE(at::equal(Weights(*trainers[0])[0], Weights(*trainers[1])[0]));
  const std::string store = "file://" + TempPath("store");
  absl::Status status[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto c = DataParallel::Connect({r, world, store, absl::Seconds(120)}, at::kCPU, [](auto s, int rank, int n) {
        return c10::make_intrusive<StoreBackendForTest>(s, rank, n);
      });
      if (!c.ok()) return void(status[r] = c.status());
      (*c)->set_bucket_bytes(4096);  // Several buckets.
      trainers[r]->set_collectives(c->get());
      status[r] = trainers[r]->BroadcastParameters();
    });
  }
  for (auto& th : ranks) th.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  auto w0 = Weights(*trainers[0]), w1 = Weights(*trainers[1]);
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_TRUE(at::equal(w0[i], w1[i])) << i;
}

TEST(LauncherTest, RankFlagsAreTakenOutOfArgv) {
  std::vector<std::string> args = {"learner_main", "--config=x", "--dp_rank=2", "--dp_world_size=4",
                                   "--dp_rendezvous=tcp://127.0.0.1:5000", "--set", "a: 1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  auto f = TakeRankFlags(&argc, argv.data());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->world_size, 4);
  EXPECT_EQ(f->rendezvous, "tcp://127.0.0.1:5000");
  ASSERT_EQ(argc, 4);
  EXPECT_STREQ(argv[1], "--config=x");
  EXPECT_STREQ(argv[3], "a: 1");
  std::string bad = "--dp_rank=5";
  char* argv2[] = {args[0].data(), bad.data(), nullptr};
  int argc2 = 2;
  EXPECT_EQ(TakeRankFlags(&argc2, argv2).status().code(), absl::StatusCode::kInvalidArgument);  // 5 of 1.
}

// Rank r contributes [r+1, 10(r+1)]; rank 0 posts a message every rank reads.
absl::Status ReduceRoundTrip(DataParallel& dp, int world) {
  std::vector<at::Tensor> t = {at::tensor({dp.rank() + 1.0, 10.0 * (dp.rank() + 1)}, at::kDouble)};
  if (auto s = dp.AllReduceSum(t); !s.ok()) return s;
  const double expected = world * (world + 1) / 2.0;
  if (t[0][0].item<double>() != expected || t[0][1].item<double>() != 10 * expected) {
    return absl::InternalError(absl::StrCat("rank ", dp.rank(), " got sum ", t[0][0].item<double>()));
  }
  if (dp.rank() == 0) return dp.StoreSet("hello", "from rank 0");
  auto msg = dp.StoreGet("hello", absl::Seconds(120));
  if (!msg.ok()) return msg.status();
  return *msg == "from rank 0" ? absl::OkStatus() : absl::InternalError("wrong control message");
}

absl::StatusOr<std::unique_ptr<DataParallel>> ConnectCpu(const Rendezvous& r) {
  return DataParallel::Connect(r, at::kCPU, [](auto s, int rank, int n) {
    return c10::make_intrusive<StoreBackendForTest>(s, rank, n);
  });
}

TEST(LauncherTest, SpawnedRanksMeetRankZeroThroughItsTcpStore) {
  const int world = 3;
  auto address = DataParallel::HostTcpStore("127.0.0.1", 0, absl::Seconds(120));
  ASSERT_TRUE(address.ok()) << address.status();
  auto pids = SpawnRanks({"--role=cpu_reduce"}, world, *address);
  ASSERT_TRUE(pids.ok()) << pids.status();
  auto dp = ConnectCpu({0, world, *address, absl::Seconds(120)});
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_TRUE(ReduceRoundTrip(**dp, world).ok());
  EXPECT_TRUE(WaitRanks(*pids).ok());
}

// A free TCP port on loopback, for a configured rendezvous.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

std::string Flag(const std::string& name, int argc, char** argv) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind(prefix, 0) == 0) return argv[i] + prefix.size();
  }
  return "";
}

absl::StatusOr<v1::DistributedConfig> GroupConfig(const std::string& text) {
  v1::DistributedConfig c;
  if (!google::protobuf::TextFormat::ParseFromString(text, &c)) return absl::InvalidArgumentError("bad --group");
  return c;
}

// A host's first rank as learner_main runs it: its plan from the config,
// its second rank spawned, then one all-reduce and a control message over
// the whole group.
int HostMain(const std::string& group_text) {
  auto config = GroupConfig(group_text);
  auto plan = config.ok() ? PlanRank(*config, {}) : config.status();
  absl::Status s = plan.status();
  if (plan.ok()) {
    auto pids = SpawnHostRanks({"--role=group_rank", "--group=" + group_text}, *plan, plan->rendezvous);
    auto dp = pids.ok() ? ConnectCpu({plan->rank, plan->world_size, plan->rendezvous, absl::Seconds(120)})
                        : pids.status();
    s = dp.ok() ? ReduceRoundTrip(**dp, plan->world_size) : dp.status();
    if (pids.ok()) s.Update(WaitRanks(*pids));
  }
  if (!s.ok()) std::fprintf(stderr, "host: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}

TEST(LauncherTest, TwoHostsMeetThroughTheConfiguredRendezvous) {
  // Two hosts of two ranks on loopback, as two machines would run them:
  // this process is host 0's first rank (it serves the store on the
  // configured port), host 1's first rank is a separate process started
  // with host_rank 1, and each host spawns its second rank.
  const int port = FreePort();
  ASSERT_GT(port, 0);
  v1::DistributedConfig config;
  config.set_hosts(2);
  config.set_ranks_per_host(2);
  config.set_rendezvous(absl::StrCat("tcp://127.0.0.1:", port));
  auto plan = PlanRank(config, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->world_size, 4);
  EXPECT_EQ(plan->rank, 0);
  auto address = DataParallel::HostTcpStore(plan->store_host, plan->store_port, absl::Seconds(120));
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(*address, config.rendezvous());
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  auto mine = SpawnHostRanks({"--role=group_rank", "--group=" + text}, *plan, *address);
  ASSERT_TRUE(mine.ok()) << mine.status();
  config.set_host_rank(1);
  google::protobuf::TextFormat::PrintToString(config, &text);
  std::string exe = "/proc/self/exe", role = "--role=group_host", group = "--group=" + text;
  char* host_argv[] = {exe.data(), role.data(), group.data(), nullptr};
  const pid_t host1 = ::fork();
  ASSERT_GE(host1, 0);
  if (host1 == 0) {
    ::execv(exe.c_str(), host_argv);
    ::_exit(127);
  }
  auto dp = ConnectCpu({0, plan->world_size, *address, absl::Seconds(120)});
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_TRUE(ReduceRoundTrip(**dp, plan->world_size).ok());
  EXPECT_TRUE(WaitRanks(*mine).ok());
  EXPECT_TRUE(WaitRanks({host1}).ok());
}

TEST(LauncherTest, GroupsThatCannotFormAreRefusedByField) {
  auto refused = [](const std::string& text, const RankFlags& flags = {}) {
    auto c = GroupConfig(text);
    if (!c.ok()) return c.status().ToString();
    auto p = PlanRank(*c, flags);
    return p.ok() ? std::string("accepted") : std::string(p.status().message());
  };
  EXPECT_NE(refused("hosts: 2 ranks_per_host: 4").find("needs distributed.rendezvous"), std::string::npos);
  EXPECT_NE(refused("hosts: 2 host_rank: 2 rendezvous: 'tcp://h:1'").find("distributed.host_rank 2"), std::string::npos);
  EXPECT_NE(refused("ranks_per_host: -1").find("distributed.ranks_per_host"), std::string::npos);
  EXPECT_NE(refused("rendezvous: 'h:29500'").find("expected tcp://HOST:PORT"), std::string::npos);
  EXPECT_NE(refused("rendezvous: 'tcp://h:0'").find("expected tcp://HOST:PORT"), std::string::npos);
  EXPECT_NE(refused("rendezvous: 'tcp://:29500'").find("expected tcp://HOST:PORT"), std::string::npos);
  EXPECT_NE(refused("ranks_per_host: 4 sharding: HYBRID_SHARD").find("HYBRID_SHARD needs hosts > 1"), std::string::npos);
  // A spawned rank whose flags do not match the config.
  EXPECT_NE(refused("ranks_per_host: 2", {1, 4, "tcp://h:1"}).find("world size 4"), std::string::npos);
  EXPECT_NE(refused("hosts: 2 ranks_per_host: 2 rendezvous: 'tcp://h:1'", {2, 4, "tcp://h:1"}).find("not a spawned rank"),
            std::string::npos);
  // One host needs no rendezvous: rank 0 picks a free port on loopback.
  EXPECT_EQ(refused("ranks_per_host: 4"), "accepted");
  auto p = PlanRank(*GroupConfig("hosts: 3 ranks_per_host: 4 host_rank: 2 rendezvous: 'tcp://learner-0.g:29500'"), {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 8);
  EXPECT_EQ(p->world_size, 12);
  EXPECT_EQ(p->store_host, "learner-0.g");
  EXPECT_EQ(p->store_port, 29500);
  auto spawned = PlanRank(*GroupConfig("hosts: 3 ranks_per_host: 4 host_rank: 2 rendezvous: 'tcp://learner-0.g:29500'"),
                          {11, 12, "tcp://learner-0.g:29500"});
  ASSERT_TRUE(spawned.ok()) << spawned.status();
  EXPECT_EQ(spawned->local_rank, 3);
  EXPECT_EQ(spawned->host_rank, 2);
}

// ---- GPU: ProcessGroupNCCL ----

std::vector<Sample> GpuBatch() { return RandomBatch(9, 4242); }

absl::StatusOr<StepResult> NcclRank(const Rendezvous& r) {
  auto dp = DataParallel::ConnectNccl(r, r.rank);
  if (!dp.ok()) return dp.status();
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(r.rank));
  auto t = MakeTrainer(Objective::kPpo, device);
  t->set_collectives(dp->get());
  if (auto s = t->BroadcastParameters(); !s.ok()) return s;
  StepResult out;
  Observe(*t, &out);
  auto m = t->PpoStep(ShardOf(GpuBatch(), r.rank, r.world_size), static_cast<int64_t>(GpuBatch().size()));
  if (!m.ok()) return m.status();
  out.metrics = *m;
  out.weights = Weights(*t);
  return out;
}

TEST(DataParallelGpuTest, NcclStepEqualsOneGpuStep) {
  if (!GpuDevicePresent()) GTEST_SKIP() << "no GPU on this machine (no /dev/nvidiaN): the NCCL data-parallel test runs on a GPU machine";
  ASSERT_TRUE(at::hasCUDA()) << "a GPU is present but LibTorch's CUDA backend did not load";
  const int want = learner::testing::DpTestGpus();
  ASSERT_GE(c10::cuda::device_count(), want) << "asked for " << want << " GPUs (KERNELRL_TEST_DP_GPUS)";
  StepResult single;
  {
    auto t = MakeTrainer(Objective::kPpo, at::Device(at::kCUDA, 0));
    Observe(*t, &single);
    auto m = t->PpoStep(GpuBatch());
    ASSERT_TRUE(m.ok()) << m.status();
    single.metrics = *m;
    single.weights = Weights(*t);
  }
  auto address = DataParallel::HostTcpStore("127.0.0.1", 0, absl::Seconds(300));
  ASSERT_TRUE(address.ok()) << address.status();
  auto pids = SpawnRanks({"--role=nccl_step"}, want, *address);
  ASSERT_TRUE(pids.ok()) << pids.status();
  auto dp = NcclRank({0, want, *address, absl::Seconds(300)});
  ASSERT_TRUE(dp.ok()) << dp.status();
  // bf16 weights and activations: the shards' sums round differently.
  // atol 2e-2 > 2 lr also absorbs Adam's ~lr * sign(g) update on near-zero gradients.
  ExpectSameStep(single, *dp, single.weights, 2e-2, 2e-2, "nccl");
  EXPECT_TRUE(WaitRanks(*pids).ok());
}

// A spawned rank: runs its half of the test named by --role, exits 0 on success.
int RankMain(const RankFlags& f, const std::string& role, const std::string& group_text) {
  const Rendezvous r{f.rank, f.world_size, f.rendezvous, absl::Seconds(300)};
  absl::Status s;
  if (role == "cpu_reduce") {
    auto dp = ConnectCpu(r);
    s = dp.ok() ? ReduceRoundTrip(**dp, f.world_size) : dp.status();
  } else if (role == "group_rank") {
    auto config = GroupConfig(group_text);
    auto plan = config.ok() ? PlanRank(*config, f) : config.status();
    auto dp = plan.ok() ? ConnectCpu(r) : plan.status();
    s = dp.ok() ? ReduceRoundTrip(**dp, f.world_size) : dp.status();
  } else if (role == "nccl_step") {
    s = NcclRank(r).status();
  } else {
    s = absl::InvalidArgumentError("unknown --role " + role);
  }
  if (!s.ok()) std::fprintf(stderr, "rank %d (%s): %s\n", f.rank, role.c_str(), s.ToString().c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace
}  // namespace kernelrl::learner::dist

int main(int argc, char** argv) {
  auto flags = kernelrl::learner::dist::TakeRankFlags(&argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", flags.status().ToString().c_str());
    return 2;
  }
  namespace dist = kernelrl::learner::dist;
  const std::string role = dist::Flag("role", argc, argv), group = dist::Flag("group", argc, argv);
  if (flags->rank > 0) return dist::RankMain(*flags, role, group);
  if (role == "group_host") return dist::HostMain(group);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
