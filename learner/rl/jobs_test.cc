#include "learner/rl/jobs.h"

#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/file.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "learner/rl/job_config.h"

namespace kernelrl::learner::rl {
namespace {

using ::kernelrl::testing::NewTempDir;

// A spec whose paths exist: a checkpoint dir with a config.json, a task set.
v1::JobSpec GoodSpec(const std::string& root) {
  ::mkdir((root + "/ckpt").c_str(), 0755);
  EXPECT_TRUE(WriteFileAtomically(root + "/ckpt/config.json", "{}").ok());
  EXPECT_TRUE(WriteFileAtomically(root + "/tasks.jsonl",
                                  "# two tasks\n{\"id\": \"level1/19_ReLU\", \"level\": 1}\n\n{\"id\": \"t2\"}\n")
                  .ok());
  v1::JobSpec spec;
  spec.set_name("test");
  spec.set_base_checkpoint(root + "/ckpt");
  spec.set_task_set(root + "/tasks.jsonl");
  spec.set_hyperparameters_text("batch { trajectories_per_step: 4 } recipe { rft { lr: 2e-5 } }");
  return spec;
}

// Where a paused job was seen held, and how many steps a runner took on a
// paused job from there on (none, if holding holds). Read under the
// manager's lock (inside Update), so no step can slip past unseen.
struct HoldWatch {
  std::atomic<int64_t> held_step{std::numeric_limits<int64_t>::max()};
  std::atomic<int> steps_while_paused{0};
};

// Runs `steps` steps (one per 5 ms of work), each recorded in the job; stops when asked.
class CountingRunner : public JobRunner {
 public:
  CountingRunner(std::atomic<int>* runs, int steps, HoldWatch* watch = nullptr)
      : runs_(runs), steps_(steps), watch_(watch) {}
  absl::Status Run(JobContext* ctx) override {
    ++*runs_;
    while (ctx->job().step() < steps_) {
      if (!ctx->HoldWhilePaused()) return absl::OkStatus();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // The step's work, not synchronisation.
      auto s = ctx->Update([this](v1::Job* j) {
        if (watch_ != nullptr && j->paused() && j->step() >= watch_->held_step.load()) ++watch_->steps_while_paused;
        j->set_step(j->step() + 1);
        (*j->mutable_metrics())["reward_mean"] = j->step() * 0.1;
      });
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::atomic<int>* runs_;
  int steps_;
  HoldWatch* watch_;
};

v1::Job WaitFor(JobManager* m, const std::string& id, v1::Job::State state) {
  int64_t rev = -1;
  v1::Job job;
  for (int i = 0; i < 400; ++i) {
    auto changed = m->WaitForChange(id, &rev, absl::Milliseconds(50), &job);
    EXPECT_TRUE(changed.ok());
    if (job.state() == state) return job;
  }
  ADD_FAILURE() << "job " << id << " never reached " << v1::Job::State_Name(state) << ", is "
                << v1::Job::State_Name(job.state());
  return job;
}

TEST(JobConfigTest, DefaultsAreThePapersAndTextOverrides) {
  auto c = ParseJobConfig("actor_optimizer { lr: 1e-6 } ppo { dual_clip: 0 }");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ppo().clip_low(), 0.2);
  EXPECT_EQ(c->ppo().clip_high(), 0.28);
  EXPECT_EQ(c->ppo().gamma(), 1.0);
  EXPECT_EQ(c->ppo().lambda(), 0.95);
  EXPECT_EQ(c->critic_optimizer().lr(), 6e-6);
  EXPECT_EQ(c->actor_optimizer().lr(), 1e-6);
  EXPECT_EQ(c->ppo().dual_clip(), 0.0);  // Explicit 0 wins over the default.
  EXPECT_EQ(c->ppo().lambda_critic(), 1.0);
  EXPECT_EQ(c->ppo().mismatch_mask(), v1::PpoConfig::TOKEN);
  EXPECT_EQ(c->critic_optimizer().head_lr_scale(), 10);
  EXPECT_EQ(c->recipe().value_pretrain().min_explained_variance(), 0.3);
}

TEST(JobConfigTest, BadValuesNameTheField) {
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {"ppo { clip_low: 1.5 }", "ppo.clip_low"},
           {"ppo { lambda: -1 }", "ppo.lambda"},
           {"ppo { entropy_coef: -0.01 }", "ppo.entropy_coef"},
           {"ppo { kl_ref_coef: -0.1 }", "ppo.kl_ref_coef"},
           {"critic_optimizer { lr: 0 }", "critic_optimizer.lr"},
           {"batch { trajectories_per_step: 0 }", "batch.trajectories_per_step"},
           {"ingest { buffer_capacity: 2 }", "ingest.buffer_capacity"},
           {"recipe { agent_warmup { skip: true } }", "recipe.rft.skip"},
           {"device { dtype: \"int8\" }", "device.dtype"},
           {"ppo { no_such_field: 1 }", "no_such_field"},
           {"ppo { tis_threshold: 2 }", "tis_threshold"},  // Removed: the ratio is against the rollout.
           {"ppo { dual_clip: 0.5 }", "ppo.dual_clip"},
           {"ppo { mismatch_high: 0.9 }", "ppo.mismatch_high"},
           {"ppo { epochs: 0 }", "ppo.epochs"},
           {"ppo { epochs: 2 critic_epochs: 1 }", "ppo.critic_epochs"},
           {"ppo { critic_replay_batches: -1 }", "ppo.critic_replay_batches"},
           {"actor_optimizer { min_lr_ratio: 2 }", "actor_optimizer.min_lr_ratio"},
           {"actor_lora { rank: -4 }", "actor_lora.rank"},
           {"batch { activation_checkpointing: false offload_activations: true }", "batch.offload_activations"},
           {"critic_lora { rank: 8 alpha: -1 }", "critic_lora.alpha"},
       }) {
    auto c = ParseJobConfig(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status();
  }
}

TEST(JobManagerTest, BadSpecIsInvalidArgumentNamingTheField) {
  const std::string root = NewTempDir("jobs_test_");
  std::atomic<int> runs{0};
  auto m = JobManager::Open(root + "/state", [&] { return std::make_unique<CountingRunner>(&runs, 1); });
  ASSERT_TRUE(m.ok());
  auto expect = [&](v1::JobSpec spec, const std::string& field) {
    auto j = (*m)->Submit(spec);
    ASSERT_FALSE(j.ok()) << field;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(j.status().message().find(field), std::string::npos) << j.status();
  };
  v1::JobSpec spec = GoodSpec(root);
  v1::JobSpec s = spec;
  s.clear_base_checkpoint();
  expect(s, "spec.base_checkpoint");
  s = spec;
  s.set_base_checkpoint(root + "/missing");
  expect(s, "spec.base_checkpoint");
  s = spec;
  s.set_task_set(root + "/ckpt/config.json");
  expect(s, "spec.task_set");
  s = spec;
  s.set_max_steps(-1);
  expect(s, "spec.max_steps");
  s = spec;
  s.set_hyperparameters_text("ppo { clip_high: -1 }");
  expect(s, "ppo.clip_high");
  // Deferred tasks are the task set's; a typo is refused, not a cycle left as it was.
  s.set_hyperparameters_text("ingest { deferred_task_ids: \"t2\" deferred_task_ids: \"level1/19_ReLu\" }");
  expect(s, "ingest.deferred_task_ids: \"level1/19_ReLu\" is not a task of");
  s.set_hyperparameters_text("ingest { deferred_task_ids: \"t2\" deferred_task_ids: \"level1/19_ReLU\" }");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  // A smaller critic must read the actor's tokens.
  auto model = [&](const std::string& name, int vocab, int hidden) {
    ::mkdir((root + "/" + name).c_str(), 0755);
    EXPECT_TRUE(WriteFileAtomically(root + "/" + name + "/config.json",
                                    absl::StrCat(R"({"model_type": "qwen2", "vocab_size": )", vocab,
                                                 R"(, "hidden_size": )", hidden, R"(, "intermediate_size": )",
                                                 4 * hidden, R"(, "num_hidden_layers": 2, "num_attention_heads": 4,
                                                 "num_key_value_heads": 2})"))
                    .ok());
    return root + "/" + name;
  };
  s = spec;
  s.set_base_checkpoint(model("actor", 64, 64));
  s.set_critic_checkpoint(root + "/missing");
  expect(s, "spec.critic_checkpoint");
  s.set_critic_checkpoint(model("critic_other_vocab", 96, 32));
  expect(s, "spec.critic_checkpoint: vocab_size 96 but the actor's is 64");
  s.set_critic_checkpoint(model("critic_small", 64, 32));
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  auto list = (*m)->List(0, "");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs_size(), 0);  // Never a FAILED job.
}

TEST(JobManagerTest, RunsWatchesCancelsListsAndSurvivesRestart) {
  const std::string root = NewTempDir("jobs_test_");
  std::atomic<int> runs{0};
  std::string first, second;
  {
    auto m = JobManager::Open(root + "/state", [&] { return std::make_unique<CountingRunner>(&runs, 1000000); });
    ASSERT_TRUE(m.ok());
    auto a = (*m)->Submit(GoodSpec(root));
    auto b = (*m)->Submit(GoodSpec(root));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status();
    first = a->id(), second = b->id();
    EXPECT_EQ(b->state(), v1::Job::PENDING);
    v1::Job running = WaitFor(m->get(), first, v1::Job::RUNNING);
    // Steps advance; watch sees them.
    int64_t rev = -1;
    v1::Job seen;
    int64_t last = -1;
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(*(*m)->WaitForChange(first, &rev, absl::Seconds(5), &seen));
      EXPECT_GE(seen.step(), last);
      last = seen.step();
    }
    EXPECT_GT(last, 0);
    // Second job waits; newest first in the list, paged.
    auto page = (*m)->List(1, "");
    ASSERT_TRUE(page.ok());
    ASSERT_EQ(page->jobs_size(), 1);
    EXPECT_EQ(page->jobs(0).id(), second);
    auto page2 = (*m)->List(1, page->next_page_token());
    ASSERT_EQ(page2->jobs_size(), 1);
    EXPECT_EQ(page2->jobs(0).id(), first);
    EXPECT_TRUE(page2->next_page_token().empty());
    EXPECT_EQ((*m)->Get(second)->state(), v1::Job::PENDING);
  }  // "Restart": the manager goes away with `first` RUNNING.
  const int64_t step_before = [&] {
    auto text = ReadFileToString(root + "/state/jobs/" + first + "/job.textproto");
    EXPECT_TRUE(text.ok());
    return static_cast<int64_t>(text->find("RUNNING") != std::string::npos);
  }();
  EXPECT_EQ(step_before, 1);
  {
    auto m = JobManager::Open(root + "/state", [&] { return std::make_unique<CountingRunner>(&runs, 1000000); });
    ASSERT_TRUE(m.ok());
    auto job = (*m)->Get(first);
    ASSERT_TRUE(job.ok());
    EXPECT_GT(job->step(), 0);  // Its progress came back.
    EXPECT_TRUE(::kernelrl::testing::WaitFor([&] { return runs.load() >= 2; }, absl::Seconds(60)));
    EXPECT_EQ(runs.load(), 2);  // Resumed by a runner.
    EXPECT_EQ((*m)->Get(first)->state(), v1::Job::RUNNING);
    auto c = (*m)->Cancel(first, "ablation done");
    ASSERT_TRUE(c.ok());
    v1::Job cancelled = WaitFor(m->get(), first, v1::Job::CANCELLED);
    EXPECT_NE(cancelled.message().find("ablation done"), std::string::npos);
    WaitFor(m->get(), second, v1::Job::RUNNING);  // The next one starts.
    EXPECT_EQ((*m)->Cancel(first, "").status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*m)->Get("job-nope").status().code(), absl::StatusCode::kNotFound);
  }
}

v1::Job WaitUntil(JobManager* m, const std::string& id, const std::function<bool(const v1::Job&)>& done) {
  int64_t rev = -1;
  v1::Job job;
  for (int i = 0; i < 100 && !(rev >= 0 && done(job)); ++i) (void)m->WaitForChange(id, &rev, absl::Milliseconds(100), &job);
  EXPECT_TRUE(done(job)) << TextProto(job);
  return job;
}

// Pause holds the runner at a step boundary, survives a restart, and Resume lets it go on.
TEST(JobManagerTest, PauseHoldsAcrossRestartAndResumeGoesOn) {
  const std::string root = NewTempDir("jobs_test_");
  std::atomic<int> runs{0};
  HoldWatch watch;
  std::string id;
  int64_t held_step = 0;
  {
    auto m = JobManager::Open(root + "/state", [&] { return std::make_unique<CountingRunner>(&runs, 1000000, &watch); });
    ASSERT_TRUE(m.ok());
    auto a = (*m)->Submit(GoodSpec(root));
    ASSERT_TRUE(a.ok());
    id = a->id();
    WaitFor(m->get(), id, v1::Job::RUNNING);
    auto waiting = (*m)->Submit(GoodSpec(root));  // PENDING behind the running one: cannot be paused.
    ASSERT_TRUE(waiting.ok());
    EXPECT_EQ((*m)->Pause(waiting->id(), "").status().code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE((*m)->Cancel(waiting->id(), "").ok());
    WaitUntil(m->get(), id, [](const v1::Job& j) { return j.step() > 2; });
    auto p = (*m)->Pause(id, "sitting over");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->paused());
    EXPECT_NE(p->message().find("sitting over"), std::string::npos);
    held_step = WaitUntil(m->get(), id, [](const v1::Job& j) { return j.held(); }).step();
    watch.held_step = held_step;  // From here until Resume, a step is a failure to hold.
    EXPECT_TRUE((*m)->Pause(id, "again").ok());  // Idempotent.
    v1::LeaseTasksRequest lease;
    lease.set_actor_id("a");
    lease.set_max_tasks(1);
    auto leases = (*m)->LeaseTasks(lease);
    ASSERT_TRUE(leases.ok());
    EXPECT_EQ(leases->leases_size(), 0);  // Actors back off.
  }
  {
    auto m = JobManager::Open(root + "/state", [&] { return std::make_unique<CountingRunner>(&runs, 1000000, &watch); });
    ASSERT_TRUE(m.ok());
    v1::Job back = WaitUntil(m->get(), id, [](const v1::Job& j) { return j.held(); });  // Still paused after a restart.
    EXPECT_TRUE(back.paused());
    EXPECT_EQ(back.step(), held_step);
    EXPECT_EQ(runs.load(), 2);
    EXPECT_EQ(watch.steps_while_paused.load(), 0);  // Held across the restart: no step while paused.
    auto r = (*m)->Resume(id);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->paused());
    WaitUntil(m->get(), id, [&](const v1::Job& j) { return !j.held() && j.step() > held_step + 2; });
    EXPECT_EQ(watch.steps_while_paused.load(), 0);
    watch.held_step = std::numeric_limits<int64_t>::max();  // The next job pauses with a step in flight.
    EXPECT_TRUE((*m)->Resume(id).ok());  // Idempotent.
    ASSERT_TRUE((*m)->Cancel(id, "").ok());
    WaitFor(m->get(), id, v1::Job::CANCELLED);
    EXPECT_EQ((*m)->Resume(id).status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*m)->Pause("job-nope", "").status().code(), absl::StatusCode::kNotFound);
    // A held job can be cancelled: the runner wakes and the job ends.
    auto c = (*m)->Submit(GoodSpec(root));
    ASSERT_TRUE(c.ok());
    WaitUntil(m->get(), c->id(), [](const v1::Job& j) { return j.state() == v1::Job::RUNNING && j.step() > 0; });
    ASSERT_TRUE((*m)->Pause(c->id(), "").ok());
    WaitUntil(m->get(), c->id(), [](const v1::Job& j) { return j.held(); });
    ASSERT_TRUE((*m)->Cancel(c->id(), "").ok());
    WaitFor(m->get(), c->id(), v1::Job::CANCELLED);
  }
}

TEST(JobManagerTest, FinishedAndFailedJobs) {
  const std::string root = NewTempDir("jobs_test_");
  std::atomic<int> runs{0};
  class Failing : public JobRunner {
    absl::Status Run(JobContext*) override { return absl::DataLossError("checkpoint truncated"); }
  };
  bool fail = false;
  auto m = JobManager::Open(root + "/state", [&]() -> std::unique_ptr<JobRunner> {
    if (fail) return std::make_unique<Failing>();
    return std::make_unique<CountingRunner>(&runs, 3);
  });
  auto a = (*m)->Submit(GoodSpec(root));
  v1::Job done = WaitFor(m->get(), a->id(), v1::Job::SUCCEEDED);
  EXPECT_EQ(done.step(), 3);
  EXPECT_NEAR(done.metrics().at("reward_mean"), 0.3, 1e-9);
  fail = true;
  auto b = (*m)->Submit(GoodSpec(root));
  v1::Job failed = WaitFor(m->get(), b->id(), v1::Job::FAILED);
  EXPECT_NE(failed.message().find("checkpoint truncated"), std::string::npos);
}

}  // namespace
}  // namespace kernelrl::learner::rl
