#include "tools/codemodel/pretrain.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/chat/chat_format.h"
#include "agent/tokenizer/tokenizer.h"
#include "common/file.h"
#include "common/json.h"
#include "common/sha256.h"
#include "learner/model.h"
#include "learner/rl/trainer.h"
#include "tools/codemodel/render.h"
#include "tools/codemodel/tool_lines.h"

namespace kernelrl::codemodel {

absl::StatusOr<PretrainResult> Pretrain(const PretrainOptions& o) {
  auto tok = agent::Tokenizer::Load(o.corpus_dir + "/tokenizer.json");
  if (!tok.ok()) return tok.status();
  auto fmt = RecordFormats::Create(tok->get());
  if (!fmt.ok()) return fmt.status();
  auto text = ReadFileToString(o.corpus_dir + "/corpus.jsonl");
  if (!text.ok()) return text.status();

  // 1. Records -> samples: the rendered chat, loss on the assistant tokens.
  std::vector<learner::rl::Sample> samples;
  int64_t model_tokens = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    auto rec = ParseJson(line);
    if (!rec.ok()) return rec.status();
    auto r = RenderRecord(*rec, *fmt, o.train_rejected);
    if (!r.ok()) return r.status();
    // RoPE would run past it silently; the checkpoint's config would then claim less than it was trained on.
    if (static_cast<int64_t>(r->ids.size()) > o.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("corpus record ", samples.size() + 1, " has ", r->ids.size(),
                                                     " tokens, more than max_position_embeddings (",
                                                     o.max_position_embeddings, ")"));
    }
    learner::rl::Sample s;
    s.id = absl::StrCat("corpus-", samples.size());
    s.ids = r->ids;
    s.loss_mask.assign(r->loss_mask.begin(), r->loss_mask.end());
    s.rollout_logprobs.assign(s.ids.size(), 0.f);
    s.reward = 1;
    model_tokens += s.model_tokens();
    samples.push_back(std::move(s));
  }
  if (samples.empty()) return absl::InvalidArgumentError(o.corpus_dir + "/corpus.jsonl is empty");

  // 2. A fresh Qwen2-shaped model.
  learner::ModelConfig mc;
  mc.vocab_size = (*tok)->vocab_size();
  mc.hidden_size = o.hidden;
  mc.intermediate_size = o.intermediate;
  mc.num_layers = o.layers;
  mc.num_heads = o.heads;
  mc.num_kv_heads = o.kv_heads;
  mc.head_dim = o.hidden / o.heads;
  mc.max_position_embeddings = o.max_position_embeddings;
  mc.rope_theta = 100000.0;
  mc.eos_token_ids = {(*tok)->TokenId("<|im_end|>"), (*tok)->TokenId("<|endoftext|>")};
  learner::ModelOptions mo;
  mo.device = o.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  mo.dtype = o.device == "cuda" ? at::kBFloat16 : at::kFloat;
  mo.trainable = true;
  auto model = learner::Transformer::Create(mc, learner::Head::kLanguageModel, mo, o.seed);
  if (!model.ok()) return model.status();

  // 3. SFT steps on random batches.
  learner::rl::TrainerOptions to;
  to.entropy_metric = false;
  to.actor.lr = o.lr;
  to.actor.warmup_steps = o.warmup_steps;
  to.actor.decay_steps = std::max(1, o.steps - o.warmup_steps);
  to.actor.weight_decay = 0.01;
  learner::rl::Trainer trainer(*std::move(model), nullptr, to);
  PretrainResult result;
  result.parameters = mc.ParameterCount();
  result.samples = static_cast<int64_t>(samples.size());
  result.mean_model_tokens = static_cast<double>(model_tokens) / samples.size();
  std::mt19937_64 rng(o.seed);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int step = 0; step < o.steps; ++step) {
    std::vector<learner::rl::Sample> batch;
    for (int b = 0; b < o.batch; ++b) {
      batch.push_back(samples[rng() % samples.size()]);
      tokens += static_cast<int64_t>(batch.back().ids.size());
    }
    auto m = trainer.SftStep(batch);
    if (!m.ok()) return m.status();
    result.losses.push_back(m->at("sft_loss"));
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.tokens_per_second = tokens / std::max(1e-9, result.seconds);
    if (o.log_every > 0 && (step % o.log_every == 0 || step + 1 == o.steps)) {
      std::fprintf(stderr, "pretrain step %d/%d sft_loss %.4f lr x%.3f, %.1f s, %.0f tokens/s\n", step + 1, o.steps,
                   m->at("sft_loss"), trainer.actor_optimizer().ScheduleFactor(), result.seconds,
                   result.tokens_per_second);
    }
  }

  // 4. The checkpoint: weights, config, the tokenizer, and the weights' SHA-256.
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(o.out_dir, ": ", ec.message()));
  if (auto s = trainer.policy().Save(o.out_dir); !s.ok()) return s;
  auto tok_text = ReadFileToString(o.corpus_dir + "/tokenizer.json");
  if (!tok_text.ok()) return tok_text.status();
  if (auto s = WriteFileAtomically(o.out_dir + "/tokenizer.json", *tok_text); !s.ok()) return s;
  // The corpus's tool-line shapes travel with the base (design_report reads a run against them).
  if (auto shapes = ReadFileToString(o.corpus_dir + "/" + kToolLineShapesFile); shapes.ok()) {
    if (auto s = WriteFileAtomically(o.out_dir + "/" + kToolLineShapesFile, *shapes); !s.ok()) return s;
  }
  auto weights = ReadFileToString(o.out_dir + "/model.safetensors");
  if (!weights.ok()) return weights.status();
  result.safetensors_sha256 = Sha256Hex(*weights);
  if (auto s = WriteFileAtomically(o.out_dir + "/SHA256SUMS",
                                   absl::StrCat(result.safetensors_sha256, "  model.safetensors\n", Sha256Hex(*tok_text),
                                                "  tokenizer.json\n"));
      !s.ok()) {
    return s;
  }
  return result;
}

}  // namespace kernelrl::codemodel
