// Shared by the OpenAI-compatible server's tests (and the actor's client
// test): a tiny random Qwen2 checkpoint with the ChatML tokenizer, made at
// test time by openai_server_fixture.py, an engine on CPU, and the HTTP
// server on a free port of 127.0.0.1.
#ifndef KERNELRL_LEARNER_POLICY_OPENAI_SERVER_TEST_UTIL_H_
#define KERNELRL_LEARNER_POLICY_OPENAI_SERVER_TEST_UTIL_H_

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agent/tokenizer/tokenizer.h"
#include "common/file.h"
#include "common/json.h"
#include "common/testing/testing.h"
#include "learner/policy/engine.h"
#include "learner/policy/openai_server.h"

namespace kernelrl::learner::testing {

struct OpenAIFixture {
  std::string dir;
  std::unique_ptr<agent::Tokenizer> tokenizer;
  std::unique_ptr<PolicyEngine> engine;
  std::unique_ptr<OpenAIServer> server;
  int port = 0;
  int32_t model_vocab = 0;
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

inline constexpr char kModelName[] = "tiny-policy";
inline constexpr int64_t kPolicyVersion = 5;
inline constexpr int64_t kMaxSeqLen = 8192;

// Made once per test binary; aborts with the script's log path on failure.
inline OpenAIFixture& Fixture() {
  static OpenAIFixture* fx = [] {
    auto* f = new OpenAIFixture;
    f->dir = ::kernelrl::testing::TempDir() + "/openai_fixture";
    const std::string cmd = ::kernelrl::testing::Python() + " learner/policy/openai_server_fixture.py '" + f->dir +
                            "' > '" + f->dir + ".log' 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "fixture failed: see %s.log\n", f->dir.c_str());
      std::abort();
    }
    auto tok = agent::Tokenizer::Load(f->dir + "/tokenizer.json");
    if (!tok.ok()) std::abort();
    f->tokenizer = *std::move(tok);
    EngineOptions eo;
    eo.max_batch = 8;
    eo.max_seq_len = kMaxSeqLen;
    auto engine = PolicyEngine::Load(f->dir, "cpu", "", kPolicyVersion, eo);
    if (!engine.ok()) {
      std::fprintf(stderr, "engine: %s\n", engine.status().ToString().c_str());
      std::abort();
    }
    f->engine = *std::move(engine);
    auto config = ParseJson(ReadFileToString(f->dir + "/config.json").value_or(""));
    if (!config.ok() || !GetJsonInt(*config, "vocab_size", 0).ok()) std::abort();
    f->model_vocab = static_cast<int32_t>(*GetJsonInt(*config, "vocab_size", 0));
    OpenAIServerOptions so;
    so.model_name = kModelName;
    so.max_seq_len = kMaxSeqLen;
    so.threads = 16;
    f->server = std::make_unique<OpenAIServer>(f->engine.get(), f->tokenizer.get(), so);
    auto port = f->server->Start("127.0.0.1", 0);
    if (!port.ok()) std::abort();
    f->port = *port;
    return f;
  }();
  return *fx;
}

// Random prompt ids drawn from the tokenizer's ordinary vocabulary.
inline std::vector<int32_t> RandomIds(std::mt19937* rng, int min_len, int max_len) {
  const int n = std::uniform_int_distribution<int>(min_len, max_len)(*rng);
  std::vector<int32_t> ids(n);
  // Ids 0..4 are the special tokens (make_tokenizer_fixtures.py lists them first).
  const int32_t top = Fixture().tokenizer->vocab_size() - 1;
  for (int32_t& id : ids) id = std::uniform_int_distribution<int32_t>(5, top)(*rng);
  return ids;
}

// Greedy generation straight from the engine: the oracle for what the API returns.
inline GenerationResult EngineGreedy(const std::vector<int32_t>& prompt, int max_new_tokens,
                                     std::vector<std::vector<int32_t>> stops = {}) {
  GenerationRequest g;
  g.prompt = prompt;
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = max_new_tokens;
  g.sampling.stop_sequences = std::move(stops);
  auto r = Fixture().engine->Generate(std::move(g));
  if (!r.ok()) std::abort();
  return *std::move(r);
}

}  // namespace kernelrl::learner::testing

#endif  // KERNELRL_LEARNER_POLICY_OPENAI_SERVER_TEST_UTIL_H_
