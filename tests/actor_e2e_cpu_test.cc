// The whole loop through real gRPC: the scripted policy completes rollouts
// against a CPU sandbox worker (SandboxService over a port, reached through
// the SandboxPool), and the trajectories reach an in-process Learner exactly
// as they were built: ids, masks, log-probs, turns.
#include <algorithm>
#include <thread>

#include "actor/actor.h"
#include "actor/learner_client.h"
#include "actor/rollout.h"
#include "actor/sandbox_pool.h"
#include "actor/test_support.h"
#include "common/file.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "sandbox/sandbox_service.h"
#include "sandbox/tests/e2e_util.h"

namespace kernelrl::actor {
namespace {

// Records pushed trajectories and acks each; rejects a stale version.
class FakeLearner final : public v1::Learner::Service {
 public:
  grpc::Status PushTrajectories(
      grpc::ServerContext*, grpc::ServerReaderWriter<v1::PushTrajectoriesAck, v1::PushTrajectoriesRequest>* stream) override {
    v1::PushTrajectoriesRequest req;
    while (stream->Read(&req)) {
      v1::PushTrajectoriesAck ack;
      ack.set_trajectory_id(req.trajectory().id());
      ack.set_accepted(req.trajectory().policy_version() >= 1);
      if (!ack.accepted()) ack.set_reason("stale policy version");
      {
        absl::MutexLock l(&mu);
        received.push_back(req);
      }
      stream->Write(ack);
    }
    return grpc::Status::OK;
  }
  grpc::Status LeaseTasks(grpc::ServerContext*, const v1::LeaseTasksRequest* req, v1::LeaseTasksResponse* resp) override {
    absl::MutexLock l(&mu);
    for (int i = 0; i < req->max_tasks() && !tasks.empty(); ++i) {
      v1::TaskLease* lease = resp->add_leases();
      lease->set_lease_id(absl::StrCat("lease-", ++leased, "-", req->actor_id()));
      lease->set_job_id("job-e2e");
      *lease->mutable_task() = tasks.back();
      lease->set_policy_version(5);
      tasks.pop_back();
    }
    return grpc::Status::OK;
  }
  absl::Mutex mu;
  std::vector<v1::PushTrajectoriesRequest> received ABSL_GUARDED_BY(mu);
  std::vector<v1::Task> tasks ABSL_GUARDED_BY(mu);
  int leased ABSL_GUARDED_BY(mu) = 0;
};

TEST(ActorEndToEndTest, ScriptedRolloutsAgainstCpuSandboxReachTheLearnerIntact) {
  const std::string python = sandbox::testing::FindTorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch on this machine";
  auto evaluator = sandbox::Evaluator::Create(sandbox::testing::CpuConfig(python));
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  MetricsRegistry metrics;
  sandbox::SandboxService sandbox_service(evaluator->get(), &metrics);
  FakeLearner learner;
  int sandbox_port = 0, learner_port = 0;
  grpc::ServerBuilder sb, lb;
  sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &sandbox_port);
  sb.RegisterService(&sandbox_service);
  lb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &learner_port);
  lb.RegisterService(&learner);
  auto sandbox_server = sb.BuildAndStart();
  auto learner_server = lb.BuildAndStart();

  for (const char* name : {"relu", "softmax"}) {
    auto task = sandbox::ReadTaskFile(absl::StrCat("sandbox/testdata/cpu_tasks/", name, ".py"), absl::StrCat("cpu/", name));
    ASSERT_TRUE(task.ok()) << task.status();
    absl::MutexLock l(&learner.mu);
    learner.tasks.push_back(*task);
  }
  LearnerClient client(grpc::CreateChannel(absl::StrCat("127.0.0.1:", learner_port), grpc::InsecureChannelCredentials()),
                       v1::LearnerClientConfig(), "actor-e2e");
  auto leases = client.Lease(4);
  ASSERT_TRUE(leases.ok()) << leases.status();
  ASSERT_EQ(leases->size(), 2u);

  v1::SandboxPoolConfig pool_config;
  pool_config.set_target(absl::StrCat("ipv4:127.0.0.1:", sandbox_port));
  pool_config.set_deadline_seconds(120);
  pool_config.set_retries(1);
  auto pool = SandboxPool::Create(pool_config);
  ASSERT_TRUE(pool.ok());
  agent::ScriptedPolicy policy("sandbox/solutions", 5, testing::Kit().tokenizer.get(), testing::Kit().plain->im_end_id());
  RolloutRunner runner(RolloutDeps{&policy, pool->get(), testing::Kit().tokenizer.get(), &*testing::Kit().with_tools,
                                   &*testing::Kit().plain},
                       testing::TestRolloutConfig("e2e_rollouts"), *ReadFileToString("sandbox/SKILL.md"));
  std::vector<v1::PushTrajectoriesRequest> batch;
  for (const v1::TaskLease& lease : *leases) {
    auto r = runner.Run(lease.task(), RolloutOptions{false, "traj-" + lease.lease_id(), lease.job_id(), 0});
    ASSERT_TRUE(r.ok()) << r.status();
    const v1::Trajectory& t = r->trajectory;
    EXPECT_EQ(t.stats().stop_reason(), "submitted") << lease.task().id();
    EXPECT_EQ(t.final_verdict().outcome(), v1::Verdict::OK) << t.final_verdict().summary();
    // CPU backend: correctness only is meaningful; the verdicts came from the worker.
    int verdicts = 0;
    for (const v1::Turn& turn : t.turns()) verdicts += turn.has_verdict();
    EXPECT_EQ(verdicts, 3);
    v1::PushTrajectoriesRequest req;
    req.set_lease_id(lease.lease_id());
    *req.mutable_trajectory() = t;
    batch.push_back(req);
  }
  // One trajectory with a stale version gets rejected, with its reason.
  v1::PushTrajectoriesRequest stale = batch[0];
  stale.mutable_trajectory()->set_id("traj-stale");
  stale.mutable_trajectory()->set_policy_version(0);
  batch.push_back(stale);
  auto acks = client.Push(batch);
  ASSERT_TRUE(acks.ok()) << acks.status();
  ASSERT_EQ(acks->size(), 3u);
  EXPECT_TRUE((*acks)[0].accepted());
  EXPECT_TRUE((*acks)[1].accepted());
  EXPECT_FALSE((*acks)[2].accepted());
  EXPECT_EQ((*acks)[2].reason(), "stale policy version");
  {
    absl::MutexLock l(&learner.mu);
    ASSERT_EQ(learner.received.size(), batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(learner.received[i], batch[i])) << i;
      const v1::Trajectory& t = learner.received[i].trajectory();
      EXPECT_EQ(t.token_ids_size(), t.loss_mask_size());
      EXPECT_EQ(t.token_ids_size(), t.logprobs_size());
  }
  }
  // The Actor's workers: lease -> rollout -> push, two at a time, until the queue is empty.
  {
    absl::MutexLock lock(&learner.mu);
    for (const char* name : {"relu", "linear_relu"}) {
      learner.tasks.push_back(*sandbox::ReadTaskFile(absl::StrCat("sandbox/testdata/cpu_tasks/", name, ".py"),
                                                     absl::StrCat("cpu/", name)));
    }
  }
  v1::ActorConfig actor_config;
  actor_config.set_concurrent_rollouts(2);
  actor_config.set_actor_id("actor-e2e");
  actor_config.mutable_learner()->set_lease_backoff_seconds(0.1);
  MetricsRegistry actor_metrics;
  Actor actor(&runner, &client, actor_config, &actor_metrics);
  actor.Start();
  for (int i = 0; i < 600; ++i) {
    {
      absl::MutexLock lock(&learner.mu);
      if (learner.received.size() == batch.size() + 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  actor.Stop();
  {
    absl::MutexLock lock(&learner.mu);
    ASSERT_EQ(learner.received.size(), batch.size() + 2);
    std::vector<std::string> tasks = {learner.received[3].trajectory().task_id(), learner.received[4].trajectory().task_id()};
    std::sort(tasks.begin(), tasks.end());
    EXPECT_EQ(tasks, (std::vector<std::string>{"cpu/linear_relu", "cpu/relu"}));
    EXPECT_EQ(learner.received[3].trajectory().final_verdict().outcome(), v1::Verdict::OK);
  }
  const std::string text = actor_metrics.Expose();
  EXPECT_NE(text.find("kernelrl_actor_pushes_total{result=\"accepted\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("kernelrl_actor_rollouts_total{stop_reason=\"submitted\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("kernelrl_actor_tool_calls_total{tool=\"Profile\"} 2"), std::string::npos) << text;
  sandbox_server->Shutdown();
  learner_server->Shutdown();
}

}  // namespace
}  // namespace kernelrl::actor
