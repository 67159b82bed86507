// Shared pieces of the actor's tests: a chat tokenizer and formats, a
// default rollout config under TEST_TMPDIR, and an in-process evaluator.
#ifndef KERNELRL_ACTOR_TEST_SUPPORT_H_
#define KERNELRL_ACTOR_TEST_SUPPORT_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "actor/rollout.h"
#include "agent/policy/scripted_policy.h"
#include "agent/chat/tools.h"
#include "agent/test_util.h"

namespace kernelrl::actor::testing {

struct ChatKit {
  std::unique_ptr<agent::Tokenizer> tokenizer;
  std::optional<agent::ChatFormat> with_tools, plain;
};

// Trained once per test binary.
inline const ChatKit& Kit() {
  static const ChatKit* kit = [] {
    auto* k = new ChatKit;
    auto tok = agent::Tokenizer::Load(agent::testing::MakeChatTokenizer());
    if (!tok.ok()) std::abort();
    k->tokenizer = *std::move(tok);
    k->with_tools.emplace(*agent::ChatFormat::Create(k->tokenizer.get(), agent::ToolSchemas()));
    k->plain.emplace(*agent::ChatFormat::Create(k->tokenizer.get(), Json::array()));
    return k;
  }();
  return *kit;
}

inline v1::RolloutConfig TestRolloutConfig(const std::string& name) {
  v1::RolloutConfig c;
  c.set_max_turns(20);
  c.set_eval_max_turns(25);
  c.set_context_tokens(131072);
  c.set_wall_seconds(120);
  c.set_max_new_tokens_per_turn(8192);
  c.set_temperature(1.0f);
  c.set_top_p(1.0f);
  c.set_workspace_root(agent::testing::TempDir() + "/" + name);
  c.set_final_evaluation(true);
  v1::ToolLimits* t = c.mutable_tools();
  t->set_bash_default_timeout_s(20);
  t->set_bash_max_timeout_s(30);
  t->set_output_cap_bytes(4000);
  t->set_read_max_lines(200);
  t->set_max_file_bytes(1 << 20);
  t->set_max_background_jobs(2);
  c.mutable_isolation()->set_contain(true);
  return c;
}

// Answers every evaluation from a function; records the requests.
class FakeEvaluator final : public EvaluationClient {
 public:
  explicit FakeEvaluator(std::function<v1::Verdict(const v1::EvaluateRequest&)> fn) : fn_(std::move(fn)) {}
  v1::Verdict Evaluate(const v1::EvaluateRequest& request) override {
    {
      absl::MutexLock l(&mu_);
      requests_.push_back(request);
    }
    return fn_(request);
  }
  std::vector<v1::EvaluateRequest> requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }

 private:
  std::function<v1::Verdict(const v1::EvaluateRequest&)> fn_;
  absl::Mutex mu_;
  std::vector<v1::EvaluateRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelrl::actor::testing

#endif  // KERNELRL_ACTOR_TEST_SUPPORT_H_
