// Version stamping through an external rollout server (SGLang or vLLM), with
// a fake server (cpp-httplib) that speaks each one's endpoints and checks
// their order: the learner's ExternalWeightSync loads new versions into it
// from disk, the actor's OpenAIPolicy stamps each turn with the version that
// served it, and a rollout sampled after the reload is accepted and trained
// by the ingest at a lag bound of 1, where the static stamp the actor used
// to send is dropped as stale.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/chat/chat_format.h"
#include "agent/chat/tools.h"
#include "agent/policy/openai_policy.h"
#include "agent/test_util.h"
#include "agent/trajectory_builder.h"
#include "common/http_listen.h"
#include "common/json.h"
#include "common/testing/testing.h"
#include "learner/rl/ingest.h"
#include "learner/sync/external_weight_sync.h"

namespace kernelrl {
namespace {

// Samples random ids from `vocab` and reports the weights it holds the way
// the real server does. Out-of-order update calls get HTTP 400, as a real
// server's would fail.
class FakeServer {
 public:
  FakeServer(std::string flavor, std::vector<int32_t> vocab, int32_t im_end, uint32_t seed)
      : flavor_(std::move(flavor)), vocab_(std::move(vocab)), im_end_(im_end), rng_(seed) {
    server_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { Complete(q, r); });
    if (flavor_ == "sglang") {
      server_.Post("/update_weights_from_disk", [this](const httplib::Request& q, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        auto body = ParseJson(q.body);
        const std::string path = body.ok() ? GetJsonString(*body, "model_path", "").value_or("") : "";
        if (!std::filesystem::is_directory(path)) return Fail(r, "no checkpoint at " + path);
        model_path_ = path;
        version_ = GetJsonString(*body, "weight_version", version_).value_or(version_);
        r.set_content(R"({"success": true, "message": "Succeeded to update model weights."})", "application/json");
      });
      server_.Get("/get_weight_version", [this](const httplib::Request&, httplib::Response& r) { Version(r); });
      server_.Post("/update_weight_version", [this](const httplib::Request& q, httplib::Response& r) { Label(q, r); });
    } else {
      server_.Post("/init_weight_transfer_engine", [this](const httplib::Request&, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        ready_ = true;
        r.set_content(R"({"message": "Weight transfer initialized"})", "application/json");
      });
      server_.Post("/pause", [this](const httplib::Request& q, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        if (q.get_param_value("mode") != "wait") return Fail(r, "pause without mode=wait drops requests");
        paused_ = true;
        r.set_content(R"({"status": "paused"})", "application/json");
      });
      server_.Post("/start_weight_update", [this](const httplib::Request&, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        if (!ready_ || !paused_) return Fail(r, "start_weight_update before init or pause");
        updating_ = true;
        r.set_content(R"({"message": "Weight update started"})", "application/json");
      });
      server_.Post("/update_weights", [this](const httplib::Request& q, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        auto body = ParseJson(q.body);
        const Json* info = body.ok() ? FindJson(*body, "update_info") : nullptr;
        const std::string path = info != nullptr ? GetJsonString(*info, "path", "").value_or("") : "";
        if (!updating_ || path.empty() || path[0] != '/' || !std::filesystem::is_directory(path)) {
          return Fail(r, "update_weights needs a started update and an absolute checkpoint directory: " + path);
        }
        model_path_ = path;
        r.set_content(R"({"message": "Weights updated"})", "application/json");
      });
      server_.Post("/finish_weight_update", [this](const httplib::Request& q, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        auto body = ParseJson(q.body);
        if (!updating_ || !body.ok()) return Fail(r, "finish_weight_update without an update");
        version_ = GetJsonString(*body, "weight_version", version_).value_or(version_);
        updating_ = false;
        r.set_content(R"({"message": "Weight update finished"})", "application/json");
      });
      server_.Post("/resume", [this](const httplib::Request&, httplib::Response& r) {
        absl::MutexLock l(&mu_);
        paused_ = false;
        r.set_content(R"({"status": "resumed"})", "application/json");
      });
      server_.Get("/weight_info", [this](const httplib::Request&, httplib::Response& r) { Version(r); });
      server_.Post("/update_weight_version", [this](const httplib::Request& q, httplib::Response& r) { Label(q, r); });
    }
    // bind_to_any_port also listens: connections queue until the loop accepts them.
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::move(ListenInBackground(&server_).value());
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  std::string model_path() {
    absl::MutexLock l(&mu_);
    return model_path_;
  }
  int completions() {
    absl::MutexLock l(&mu_);
    return completions_;
  }

 private:
  static void Fail(httplib::Response& r, const std::string& why) {
    r.status = 400;
    r.set_content(DumpJson(Json::object({{"error", Json::object({{"message", Json(why)}})}})), "application/json");
  }
  // No version until one is set (vLLM before its first update): null.
  void Version(httplib::Response& r) {
    absl::MutexLock l(&mu_);
    r.set_content(DumpJson(Json::object({{"weight_version", version_.empty() ? Json() : Json(version_)}})),
                  "application/json");
  }
  void Label(const httplib::Request& q, httplib::Response& r) {
    absl::MutexLock l(&mu_);
    auto body = ParseJson(q.body);
    const std::string v = body.ok() ? GetJsonString(*body, "new_version", "").value_or("") : "";
    if (v.empty()) return Fail(r, "update_weight_version without new_version");
    version_ = v;
    r.set_content(DumpJson(Json::object({{"success", Json(true)}, {"new_version", Json(v)}})),
                  "application/json");
  }
  void Complete(const httplib::Request& q, httplib::Response& r) {
    absl::MutexLock l(&mu_);
    if (paused_) return Fail(r, "paused");  // The sync resumes before it returns.
    ++completions_;
    auto body = ParseJson(q.body);
    if (!body.ok() || FindJson(*body, "prompt") == nullptr) return Fail(r, "no prompt");
    Json ids = Json::array(), tokens = Json::array(), lps = Json::array();
    const int n = 1 + static_cast<int>(rng_() % 6);
    for (int i = 0; i <= n; ++i) {
      const int32_t id = i == n ? im_end_ : vocab_[rng_() % vocab_.size()];
      ids.push_back(Json(id));
      tokens.push_back(Json(absl::StrCat("token_id:", id)));
      lps.push_back(Json(-0.05 - 3.0 * std::uniform_real_distribution<double>(0, 1)(rng_)));
    }
    Json choice = Json::object({{"text", Json("")},
                                {"finish_reason", Json("stop")},
                                {"prompt_token_ids", *FindJson(*body, "prompt")},
                                {"token_ids", ids},
                                {"logprobs", Json::object({{"tokens", tokens}, {"token_logprobs", lps}})}});
    Json out = Json::object({{"object", Json("text_completion")}, {"choices", Json::array({choice})}});
    if (flavor_ == "sglang") out["metadata"] = Json::object({{"weight_version", Json(version_)}});
    r.set_content(DumpJson(out), "application/json");
  }

  const std::string flavor_;
  const std::vector<int32_t> vocab_;
  const int32_t im_end_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  absl::Mutex mu_;
  std::mt19937 rng_ ABSL_GUARDED_BY(mu_);
  std::string version_ ABSL_GUARDED_BY(mu_);  // "": none yet.
  std::string model_path_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false, paused_ ABSL_GUARDED_BY(mu_) = false,
       updating_ ABSL_GUARDED_BY(mu_) = false;
  int completions_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Chat {
  std::unique_ptr<agent::Tokenizer> tokenizer;
  std::optional<agent::ChatFormat> with_tools, plain;
};

const Chat& Fixture() {
  static const Chat* c = [] {
    auto* f = new Chat;
    const std::string path = agent::testing::MakeChatTokenizer();
    EXPECT_FALSE(path.empty()) << "tokenizer fixture failed";
    auto tok = agent::Tokenizer::Load(path);
    EXPECT_TRUE(tok.ok()) << tok.status();
    f->tokenizer = *std::move(tok);
    f->with_tools.emplace(*agent::ChatFormat::Create(f->tokenizer.get(), agent::ToolSchemas()));
    f->plain.emplace(*agent::ChatFormat::Create(f->tokenizer.get(), Json::array()));
    return f;
  }();
  return *c;
}

// A checkpoint directory as the learner writes one (the fake only checks it exists).
std::string Checkpoint(const std::string& root, int64_t version) {
  const std::string dir = absl::StrCat(root, "/step-", version, "/policy");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{}";
  return dir;
}

// A two-turn rollout of `task` through `policy`; the trajectory the actor would push.
v1::Trajectory Rollout(agent::OpenAIPolicy* policy, const v1::TaskLease& lease, std::mt19937* rng,
                       std::vector<int64_t>* turn_versions) {
  const Chat& c = Fixture();
  agent::TrajectoryBuilder b(&*c.with_tools, &*c.plain, c.tokenizer.get());
  EXPECT_TRUE(b.Start("You write CUDA kernels.", "Task: " + lease.task().id()).ok());
  for (int turn = 0; turn < 2; ++turn) {
    agent::PolicyRequest req;
    req.prompt_ids = b.PromptIds();
    req.max_new_tokens = 16;
    req.temperature = 1.0f;
    req.top_p = 1.0f;
    req.stop_ids = {c.plain->im_end_id()};
    req.seed = (*rng)() | 1;
    req.request_id = absl::StrCat(lease.lease_id(), "/turn-", turn);
    auto r = policy->Generate(req);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    turn_versions->push_back(r->policy_version);
    EXPECT_TRUE(b.AddAssistant({r->ids, r->logprobs, r->policy_version, r->sampling}).ok());
    if (turn == 0) EXPECT_TRUE(b.AddToolResult("Bash", "{}", "ok", nullptr).ok());
  }
  v1::Trajectory t = b.Build();
  t.set_id(absl::StrCat("traj-", lease.lease_id()));
  t.set_task_id(lease.task().id());
  t.set_job_id(lease.job_id());
  t.set_reward(1.0);
  t.mutable_final_verdict()->set_outcome(v1::Verdict::OK);
  return t;
}

class ExternalVersionStampTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExternalVersionStampTest, AfterAReloadTheNextTurnCarriesTheNewVersionAndIsTrained) {
  const std::string flavor = GetParam();
  const Chat& c = Fixture();
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> vocab = c.tokenizer->Encode("kernel warp tile shared fuse relu x = ( ) #");
  ASSERT_FALSE(vocab.empty());
  FakeServer server(flavor, vocab, c.plain->im_end_id(), seed);

  v1::PolicyBackendConfig pc;
  pc.set_kind("openai_completions");
  pc.set_address(server.url());
  pc.set_server(flavor);
  pc.set_timeout_seconds(60);
  pc.set_static_policy_version(0);  // What every turn carried before the version query.
  auto policy = agent::OpenAIPolicy::Create(pc, c.tokenizer.get(), c.plain->im_end_id(), agent::ToolSchemas());
  ASSERT_TRUE(policy.ok()) << policy.status();

  v1::ExternalPolicyServers xc;
  xc.set_server(flavor);
  xc.add_addresses(server.url());
  auto sync = learner::ExternalWeightSync::Create(xc);
  ASSERT_TRUE(sync.ok()) << sync.status();

  learner::rl::IngestOptions io;
  io.max_policy_lag = 1;
  io.temperature = 1.0;
  io.vocab_size = c.tokenizer->vocab_size();
  auto ingest = learner::rl::Ingest::Open(testing::NewTempDir("ingest_"), "job-x", io, 0);
  ASSERT_TRUE(ingest.ok()) << ingest.status();
  std::vector<v1::Task> tasks(2);
  tasks[0].set_id("level1/1_Op");
  tasks[1].set_id("level1/2_Op");
  (*ingest)->SetStage("agentic_ppo", tasks, 1, -1, /*model_only=*/true);

  // Before any update the server reports no version; the sync labels its
  // base weights 0, and a turn sampled now carries 0.
  auto first = (*sync)->ServedVersion(0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 0);
  {
    agent::PolicyRequest req;
    req.prompt_ids = c.tokenizer->Encode("warm up");
    req.max_new_tokens = 4;
    req.stop_ids = {c.plain->im_end_id()};
    auto r = (*policy)->Generate(req);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->policy_version, 0);
  }

  // The learner commits versions 1..k and publishes each, as the recipe does.
  const std::string root = testing::NewTempDir("ckpt_");
  const int64_t k = 2 + static_cast<int64_t>(rng() % 4);
  for (int64_t v = 1; v <= k; ++v) {
    const std::string dir = Checkpoint(root, v);
    ASSERT_TRUE((*sync)->Publish(dir, v).ok());
    EXPECT_EQ(server.model_path(), std::filesystem::absolute(dir).lexically_normal().string());
    (*ingest)->SetPolicyVersion(v);
  }
  auto served = (*sync)->ServedVersion(0);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(*served, k);

  auto leases = (*ingest)->Lease("actor-x", 2);
  ASSERT_TRUE(leases.ok()) << leases.status();
  ASSERT_EQ(leases->size(), 2u);
  std::vector<int64_t> versions;
  v1::Trajectory t = Rollout(policy->get(), (*leases)[0], &rng, &versions);
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0], k);
  EXPECT_EQ(versions[1], k);
  EXPECT_EQ(t.policy_version(), k);
  EXPECT_EQ(t.sampling().policy(), "model");
  EXPECT_FLOAT_EQ(t.sampling().temperature(), 1.0f);

  // Accepted, taken into a batch and trained.
  auto ack = (*ingest)->Push((*leases)[0].lease_id(), t);
  EXPECT_TRUE(ack.accepted()) << ack.reason();
  // The same rollout with the static stamp is what the version query fixes:
  // k versions behind, dropped as stale.
  v1::Trajectory stale = Rollout(policy->get(), (*leases)[1], &rng, &versions);
  for (v1::Turn& turn : *stale.mutable_turns()) turn.set_policy_version(pc.static_policy_version());
  stale.set_policy_version(pc.static_policy_version());
  auto stale_ack = (*ingest)->Push((*leases)[1].lease_id(), stale);
  EXPECT_FALSE(stale_ack.accepted());
  EXPECT_NE(stale_ack.reason().find("stale"), std::string::npos) << stale_ack.reason();

  auto batch = (*ingest)->Take(1);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].id(), t.id());
  EXPECT_TRUE((*ingest)->MarkTrained({t.id()}, k + 1).ok());
  EXPECT_EQ((*ingest)->Info().trained, 1);
  EXPECT_GE((*ingest)->Info().rejected, 1);
  EXPECT_GE(server.completions(), 4);
}

INSTANTIATE_TEST_SUITE_P(Servers, ExternalVersionStampTest, ::testing::Values("sglang", "vllm"));

// vLLM reports only the current version: a request that straddles an update
// is stamped with the older one, so staleness errs on the safe side. SGLang
// without a weight_version, or a non-integer one, is an error, not a guess.
TEST(ExternalVersionStampTest, WeightVersionParsing) {
  using agent::OpenAIPolicy;
  Json s = Json("17");
  auto v = OpenAIPolicy::ParseWeightVersion(&s);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 17);
  Json n = Json(3);
  EXPECT_EQ(*OpenAIPolicy::ParseWeightVersion(&n), 3);
  Json bad = Json("default");
  EXPECT_FALSE(OpenAIPolicy::ParseWeightVersion(&bad).ok());
  EXPECT_FALSE(OpenAIPolicy::ParseWeightVersion(nullptr).ok());
}

// vLLM at temperature != 1 without processed log-probs would give wrong
// importance weights: refused before any request is sent.
TEST(ExternalVersionStampTest, VllmRawLogprobsAtTemperatureAreRefused) {
  const Chat& c = Fixture();
  FakeServer server("vllm", c.tokenizer->Encode("kernel warp"), c.plain->im_end_id(), 1);
  v1::ExternalPolicyServers xc;  // Labels the base weights 0.
  xc.set_server("vllm");
  xc.add_addresses(server.url());
  ASSERT_TRUE(learner::ExternalWeightSync::Create(xc).ok());
  v1::PolicyBackendConfig pc;
  pc.set_kind("openai_completions");
  pc.set_address(server.url());
  pc.set_server("vllm");
  auto policy = agent::OpenAIPolicy::Create(pc, c.tokenizer.get(), c.plain->im_end_id(), agent::ToolSchemas());
  ASSERT_TRUE(policy.ok());
  agent::PolicyRequest req;
  req.prompt_ids = c.tokenizer->Encode("hello");
  req.temperature = 0.7f;
  req.max_new_tokens = 4;
  auto r = (*policy)->Generate(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(server.completions(), 0);
  pc.set_vllm_processed_logprobs(true);
  policy = agent::OpenAIPolicy::Create(pc, c.tokenizer.get(), c.plain->im_end_id(), agent::ToolSchemas());
  ASSERT_TRUE(policy.ok());
  r = (*policy)->Generate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->sampling.temperature(), 0.7f);
  EXPECT_EQ(r->sampling.policy(), "model");
}

}  // namespace
}  // namespace kernelrl
