// The OpenAI policy backends (agent/policy) against the learner's real OpenAI-compatible
// server (in-process, tiny random Qwen2 on CPU): multi-turn trajectories
// hold exactly the ids the server saw and sampled (checked against the
// engine's own greedy generation), chat is token-exact exactly when the
// server's rendering equals the trajectory's, vLLM-style "token_id:N"
// replies parse, and failures come back as clear absl::Status values.
// RolloutRunner is driven through the completions backend too: this binary
// links LibTorch for the in-process engine, whose libtorch.so exports an
// unversioned std::filesystem::remove_all; the workspace's cleanup bound to
// it and crashed until it moved to common/file's RemoveTree.
#include "agent/policy/openai_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "gtest/gtest.h"
#include "httplib.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/chat/chat_format.h"
#include "agent/chat/tools.h"
#include "actor/rollout.h"
#include "actor/test_support.h"
#include "agent/trajectory_builder.h"
#include "common/file.h"
#include "common/http_listen.h"
#include "learner/policy/openai_server_test_util.h"

namespace kernelrl::actor {
namespace {

using agent::ChatTurn;
using agent::OpenAIPolicy;
using agent::PolicyRequest;
using agent::PolicyResponse;
using agent::ToolSchemas;
using learner::testing::Fixture;

struct Formats {
  agent::ChatFormat with_tools, plain;
};

const Formats& Chat() {
  static const Formats* f = new Formats{*agent::ChatFormat::Create(Fixture().tokenizer.get(), ToolSchemas()),
                                        *agent::ChatFormat::Create(Fixture().tokenizer.get(), Json::array())};
  return *f;
}

int32_t ImEnd() { return Chat().plain.im_end_id(); }

std::mt19937 Rng() {
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return std::mt19937(seed);
}

v1::PolicyBackendConfig Config(const std::string& kind) {
  v1::PolicyBackendConfig c;
  c.set_kind(kind);
  c.set_address(Fixture().base_url());
  c.set_model(learner::testing::kModelName);
  c.set_timeout_seconds(120);
  c.set_max_retries(1);
  return c;
}

std::unique_ptr<OpenAIPolicy> Client(const v1::PolicyBackendConfig& c) {
  auto p = OpenAIPolicy::Create(c, Fixture().tokenizer.get(), ImEnd(), ToolSchemas());
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::string Words(std::mt19937* rng, int n) {
  static const char* kWords[] = {"kernel", "warp", "tile", "shared", "fuse", "relu", "x", "=", "(", ")", "\n", "#"};
  std::string s;
  for (int i = 0; i < n; ++i) absl::StrAppend(&s, kWords[(*rng)() % 12], " ");
  return s;
}

PolicyRequest Request(const agent::TrajectoryBuilder& b, int max_new, int turn) {
  PolicyRequest r;
  r.prompt_ids = b.PromptIds();
  r.max_new_tokens = max_new;
  r.temperature = 0;
  r.stop_ids = {ImEnd()};
  r.turn = turn;
  r.request_id = absl::StrCat("test/turn-", turn);
  r.history = &b.history();
  return r;
}

TEST(OpenAIPolicyTest, CompletionsTrajectoryHoldsExactlyWhatTheServerSawAndSampled) {
  std::mt19937 rng = Rng();
  v1::PolicyBackendConfig config = Config("openai_completions");
  config.set_address(Fixture().base_url() + "/v1/");  // A base URL with /v1 works too.
  std::unique_ptr<OpenAIPolicy> policy = Client(config);
  ASSERT_NE(policy, nullptr);
  agent::TrajectoryBuilder b(&Chat().with_tools, &Chat().plain, Fixture().tokenizer.get());
  ASSERT_TRUE(b.Start("You write CUDA kernels. " + Words(&rng, 5), "Task: " + Words(&rng, 20)).ok());
  std::vector<PolicyRequest> requests;
  std::vector<PolicyResponse> responses;
  for (int turn = 0; turn < 3; ++turn) {
    PolicyRequest req = Request(b, std::uniform_int_distribution<int>(4, 24)(rng), turn);
    absl::StatusOr<PolicyResponse> r = policy->Generate(req);
    ASSERT_TRUE(r.ok()) << r.status();
    // The oracle: the engine itself, greedy, on the ids the actor sent.
    const learner::GenerationResult want = learner::testing::EngineGreedy(req.prompt_ids, req.max_new_tokens, {{ImEnd()}});
    EXPECT_EQ(r->ids, want.output_ids);
    ASSERT_EQ(r->logprobs.size(), want.logprobs.size());
    // Two fp32 runs of the engine (the server's and the oracle's) can part by ~1e-5 at -3.5: float
    // rounding of one reduction order against another. A wrong token's logprob is far further off.
    for (size_t i = 0; i < want.logprobs.size(); ++i) EXPECT_NEAR(r->logprobs[i], want.logprobs[i], 1e-4);
    EXPECT_EQ(r->policy_version, learner::testing::kPolicyVersion);
    EXPECT_EQ(r->finish_reason, want.finish_reason == "stop_sequence" ? "stop" : "length");
    ASSERT_TRUE(b.AddAssistant({r->ids, r->logprobs, r->policy_version}).ok());
    ASSERT_TRUE(b.AddToolResult("Bash", "{}", Words(&rng, 10), nullptr).ok());
    requests.push_back(req);
    responses.push_back(*r);
  }
  const v1::Trajectory t = b.Build();
  const std::vector<int32_t> ids(t.token_ids().begin(), t.token_ids().end());
  for (size_t k = 0; k < requests.size(); ++k) {
    const std::vector<int32_t>& p = requests[k].prompt_ids;
    ASSERT_LE(p.size(), ids.size());
    EXPECT_TRUE(std::equal(p.begin(), p.end(), ids.begin())) << "prompt " << k << " is not a prefix";
    // The sampled ids follow the prompt verbatim, with their log-probs and mask 1.
    const std::vector<int32_t>& s = responses[k].ids;
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_EQ(ids[p.size() + i], s[i]);
      EXPECT_EQ(t.loss_mask(static_cast<int>(p.size() + i)), 1);
      EXPECT_FLOAT_EQ(t.logprobs(static_cast<int>(p.size() + i)), responses[k].logprobs[i]);
    }
  }
}

// The whole rollout loop through the OpenAI backend against our server, in
// a binary that links LibTorch: every model token of the trajectory carries
// the server's log-prob (<= 0) and policy version, the stop reason is set,
// and the rollout's workspace is gone afterwards.
TEST(OpenAIPolicyTest, RolloutRunnerDrivesTheServerEndToEnd) {
  std::mt19937 rng = Rng();
  std::unique_ptr<OpenAIPolicy> policy = Client(Config("openai_completions"));
  ASSERT_NE(policy, nullptr);
  testing::FakeEvaluator eval([](const v1::EvaluateRequest&) {
    v1::Verdict v;
    v.set_outcome(v1::Verdict::COMPILE_ERROR);
    v.set_reward(-1);
    return v;
  });
  v1::RolloutConfig config = testing::TestRolloutConfig(absl::StrCat("openai_rollout_", rng()));
  config.set_max_turns(3);
  config.set_max_new_tokens_per_turn(16 + static_cast<int>(rng() % 16));
  config.set_temperature(1.0f);
  config.set_final_evaluation(false);
  RolloutRunner runner(RolloutDeps{policy.get(), &eval, Fixture().tokenizer.get(), &Chat().with_tools, &Chat().plain},
                       config, "");
  v1::Task task;
  task.set_id("cpu/relu");
  task.set_reference_source("import torch\n# " + Words(&rng, 8) + "\n");
  RolloutOptions opts;
  opts.trajectory_id = absl::StrCat("openai-", rng());
  absl::StatusOr<RolloutResult> r = runner.Run(task, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::Trajectory& t = r->trajectory;
  EXPECT_FALSE(t.stats().stop_reason().empty());
  int model_tokens = 0;
  for (int i = 0; i < t.token_ids_size(); ++i) {
    if (t.loss_mask(i) != 1) continue;
    ++model_tokens;
    EXPECT_LE(t.logprobs(i), 0.0f) << i;
  }
  EXPECT_GT(model_tokens, 0);
  for (const v1::Turn& turn : t.turns()) {
    if (turn.role() == v1::Turn::ASSISTANT) {
      EXPECT_EQ(turn.policy_version(), learner::testing::kPolicyVersion);
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(config.workspace_root())) << "the rollout's workspace was not removed";
}

TEST(OpenAIPolicyTest, ChatIsTokenExactWhenTheServerRendersTheSamePrompt) {
  std::mt19937 rng = Rng();
  std::unique_ptr<OpenAIPolicy> strict = Client(Config("openai_chat"));
  v1::PolicyBackendConfig loose_config = Config("openai_chat");
  loose_config.set_allow_retokenize(true);
  std::unique_ptr<OpenAIPolicy> loose = Client(loose_config);
  ASSERT_TRUE(strict != nullptr && loose != nullptr);
  agent::TrajectoryBuilder b(&Chat().with_tools, &Chat().plain, Fixture().tokenizer.get());
  ASSERT_TRUE(b.Start("You write CUDA kernels.", "Task: " + Words(&rng, 15)).ok());
  int exact_turns = 0, refused_turns = 0;
  for (int turn = 0; turn < 3; ++turn) {
    PolicyRequest req = Request(b, std::uniform_int_distribution<int>(4, 16)(rng), turn);
    // What the server renders from the messages: the history with each
    // assistant turn as its decoded text.
    std::vector<ChatTurn> as_text = b.history();
    for (ChatTurn& t : as_text) {
      if (!t.generated_ids.has_value()) continue;
      std::vector<int32_t> g = *t.generated_ids;
      if (!g.empty() && g.back() == ImEnd()) g.pop_back();
      t.content = Fixture().tokenizer->Decode(g);
      t.generated_ids.reset();
    }
    const bool same_prompt = Chat().with_tools.Render(as_text, true)->ids == req.prompt_ids;
    absl::StatusOr<PolicyResponse> r = strict->Generate(req);
    if (same_prompt) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->ids, learner::testing::EngineGreedy(req.prompt_ids, req.max_new_tokens, {{ImEnd()}}).output_ids);
      ++exact_turns;
    } else {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
      EXPECT_TRUE(absl::StrContains(r.status().message(), "chat template")) << r.status();
      ++refused_turns;
      r = loose->Generate(req);  // Evaluation mode: accepted, ids as the server sampled them.
      ASSERT_TRUE(r.ok()) << r.status();
    }
    EXPECT_EQ(r->logprobs.size(), r->ids.size());
    ASSERT_TRUE(b.AddAssistant({r->ids, r->logprobs, r->policy_version}).ok());
    ASSERT_TRUE(b.AddToolResult("Read", "{}", Words(&rng, 8), nullptr).ok());
  }
  EXPECT_GE(exact_turns, 1);  // The first turn has no assistant text to re-render.
  std::printf("chat turns: %d token-exact, %d refused (re-rendered prompt differs)\n", exact_turns, refused_turns);
}

TEST(OpenAIPolicyTest, ParsesVllmStyleTokenIdStringsAndRefusesReplyWithoutIds) {
  std::mt19937 rng = Rng();
  std::unique_ptr<OpenAIPolicy> policy = Client(Config("openai_completions"));
  ASSERT_NE(policy, nullptr);
  PolicyRequest req;
  req.prompt_ids = learner::testing::RandomIds(&rng, 5, 30);
  req.max_new_tokens = 10;
  req.temperature = 0;
  req.stop_ids = {ImEnd()};
  // A reply as `vllm serve --return-tokens-as-token-ids` gives it: no token_ids field.
  Json body = policy->CompletionBody(req);
  body["return_token_ids"] = Json(false);
  httplib::Client http("127.0.0.1", Fixture().port);
  http.set_read_timeout(120, 0);
  httplib::Result res = http.Post("/v1/completions", DumpJson(body), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json reply = *ParseJson(res->body);
  ASSERT_EQ(FindJson(FindJson(reply, "choices")->at(0), "token_ids"), nullptr);
  absl::StatusOr<PolicyResponse> r = policy->ParseCompletion(reply, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ids, learner::testing::EngineGreedy(req.prompt_ids, 10, {{ImEnd()}}).output_ids);
  EXPECT_EQ(r->logprobs.size(), r->ids.size());

  // A plain OpenAI reply (text only): refused for training, re-tokenized when allowed.
  body["return_tokens_as_token_ids"] = Json(false);
  res = http.Post("/v1/completions", DumpJson(body), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  reply = *ParseJson(res->body);
  r = policy->ParseCompletion(reply, req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "no token ids")) << r.status();
  v1::PolicyBackendConfig loose = Config("openai_completions");
  loose.set_allow_retokenize(true);
  r = Client(loose)->ParseCompletion(reply, req);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> want = Fixture().tokenizer->Encode(GetJsonString(FindJson(reply, "choices")->at(0), "text", "").value());
  if (GetJsonString(FindJson(reply, "choices")->at(0), "finish_reason", "").value() == "stop") want.push_back(ImEnd());
  EXPECT_EQ(r->ids, want);
  // A server that changed the prompt (e.g. added BOS).
  req.prompt_ids.insert(req.prompt_ids.begin(), 1);
  body["return_token_ids"] = Json(true);
  res = http.Post("/v1/completions", DumpJson(body), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  r = policy->ParseCompletion(*ParseJson(res->body), req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "different prompt")) << r.status();
}

TEST(OpenAIPolicyTest, ErrorsAreClearStatuses) {
  std::mt19937 rng = Rng();
  PolicyRequest req;
  req.prompt_ids = learner::testing::RandomIds(&rng, 3, 10);
  req.max_new_tokens = 4;
  req.stop_ids = {ImEnd()};

  v1::PolicyBackendConfig c = Config("openai_completions");
  c.set_model("no-such-model");
  absl::StatusOr<PolicyResponse> r = Client(c)->Generate(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "HTTP 404")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "model_not_found")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "/v1/completions")) << r.status();

  PolicyRequest bad = req;
  bad.prompt_ids.push_back(Fixture().model_vocab + 3);
  r = Client(Config("openai_chat"))->Generate(bad);  // Chat needs the history.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = Client(Config("openai_completions"))->Generate(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "HTTP 400")) << r.status();

  // Nothing listening: Unavailable after the retries, naming the URL.
  int closed_port = 0;
  {  // A port that was free a moment ago: bound, never listened on, closed.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    closed_port = ntohs(a.sin_port);
    ::close(fd);
  }
  c = Config("openai_completions");
  c.set_address("http://127.0.0.1:" + std::to_string(closed_port));
  c.set_max_retries(2);
  r = Client(c)->Generate(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status().message(), std::to_string(closed_port))) << r.status();

  c.set_address("127.0.0.1:8000");
  EXPECT_EQ(OpenAIPolicy::Create(c, Fixture().tokenizer.get(), ImEnd(), Json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.set_address(Fixture().base_url());
  c.set_api_key_file("/nonexistent/key");
  EXPECT_EQ(OpenAIPolicy::Create(c, Fixture().tokenizer.get(), ImEnd(), Json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OpenAIPolicyTest, RetriesServerErrorsAndSendsTheKey) {
  // A stand-in server: 503 (OpenAI error body) on the first call, then a reply.
  httplib::Server fake;
  std::atomic<int> calls{0};
  std::string auth, request_id;
  fake.Post("/v1/completions", [&](const httplib::Request& q, httplib::Response& res) {
    auth = q.get_header_value("Authorization");
    request_id = q.get_header_value("X-Request-Id");
    if (calls.fetch_add(1) == 0) {
      res.status = 503;
      res.set_content(R"({"error": {"message": "engine overloaded", "type": "server_error", "param": null, "code": null}})",
                      "application/json");
      return;
    }
    res.set_content(R"({"choices": [{"index": 0, "text": "ab", "finish_reason": "stop", "token_ids": [17, 42, )" +
                        std::to_string(ImEnd()) +
                        R"(], "logprobs": {"tokens": ["a", "b", "c"], "token_logprobs": [-0.5, -1.25, -0.125]}}]})",
                    "application/json");
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread t = std::move(ListenInBackground(&fake).value());
  const std::string key_file = std::string(std::getenv("TEST_TMPDIR")) + "/key";
  ASSERT_TRUE(WriteFileAtomically(key_file, "sk-test-123\n").ok());
  v1::PolicyBackendConfig c = Config("openai_completions");
  c.set_address("http://127.0.0.1:" + std::to_string(port));
  c.set_api_key_file(key_file);
  c.set_static_policy_version(11);
  PolicyRequest req;
  req.prompt_ids = {5, 6, 7};
  req.max_new_tokens = 3;
  req.request_id = "traj-1/turn-0";
  absl::StatusOr<PolicyResponse> r = Client(c)->Generate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(r->ids, (std::vector<int32_t>{17, 42, ImEnd()}));
  EXPECT_EQ(r->logprobs, (std::vector<float>{-0.5f, -1.25f, -0.125f}));
  EXPECT_EQ(r->policy_version, 11);
  EXPECT_EQ(auth, "Bearer sk-test-123");
  EXPECT_EQ(request_id, "traj-1/turn-0");

  c.set_max_retries(0);
  calls = 0;
  r = Client(c)->Generate(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "HTTP 503: engine overloaded")) << r.status();
  fake.stop();
  t.join();
}

}  // namespace
}  // namespace kernelrl::actor
