// pretrain: the code model from scratch on corpus_gen's corpus (tools/codemodel/pretrain.h).
//
//   pretrain --corpus_dir=DIR --out=CKPT [--device=cpu|cuda] [--steps=200 --batch=8 --lr=1e-3]
//            [--hidden=256 --layers=4 --heads=4 --kv_heads=2 --intermediate=704] [--threads=N]
//
// Prints one JSON line: parameters, samples, first and last loss, the weights' SHA-256.
#include <ATen/Parallel.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "tools/codemodel/pretrain.h"

ABSL_FLAG(std::string, corpus_dir, "", "corpus_gen's output (corpus.jsonl, tokenizer.json)");
ABSL_FLAG(std::string, out, "", "checkpoint directory");
ABSL_FLAG(std::string, device, "cpu", "cpu (fp32) or cuda (bf16)");
ABSL_FLAG(int, steps, 200, "SFT steps");
ABSL_FLAG(int, batch, 8, "trajectories per step");
ABSL_FLAG(double, lr, 1e-3, "peak learning rate");
ABSL_FLAG(int, warmup_steps, 20, "linear warm-up steps");
ABSL_FLAG(int64_t, hidden, 256, "hidden size");
ABSL_FLAG(int64_t, layers, 4, "layers");
ABSL_FLAG(int64_t, heads, 4, "attention heads");
ABSL_FLAG(int64_t, kv_heads, 2, "key/value heads");
ABSL_FLAG(int64_t, intermediate, 704, "MLP width");
ABSL_FLAG(uint64_t, seed, 1, "weights and batches");
ABSL_FLAG(bool, train_rejected, true,
          "false: replies whose code the next verdict rejected (planted faults, fp16 designs) are context, not trained");
ABSL_FLAG(int, threads, 0, "CPU intra-op threads (0 = LibTorch's default, one per core; 1 on a shared CPU)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kernelrl::codemodel::PretrainOptions o;
  o.corpus_dir = absl::GetFlag(FLAGS_corpus_dir);
  o.out_dir = absl::GetFlag(FLAGS_out);
  if (o.corpus_dir.empty() || o.out_dir.empty()) {
    std::fprintf(stderr, "usage: pretrain --corpus_dir=DIR --out=CKPT [--device=cpu|cuda] ...\n");
    return 2;
  }
  o.device = absl::GetFlag(FLAGS_device);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.hidden = absl::GetFlag(FLAGS_hidden);
  o.layers = absl::GetFlag(FLAGS_layers);
  o.heads = absl::GetFlag(FLAGS_heads);
  o.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.intermediate = absl::GetFlag(FLAGS_intermediate);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.train_rejected = absl::GetFlag(FLAGS_train_rejected);
  if (const int t = absl::GetFlag(FLAGS_threads); t > 0) at::set_num_threads(t);
  auto r = kernelrl::codemodel::Pretrain(o);
  if (!r.ok()) {
    std::fprintf(stderr, "pretrain: %s\n", r.status().ToString().c_str());
    return 1;
  }
  using kernelrl::Json;
  Json out = Json::object({{"parameters", Json(r->parameters)},
                           {"samples", Json(r->samples)},
                           {"mean_model_tokens", Json(r->mean_model_tokens)},
                           {"first_loss", Json(r->losses.front())},
                           {"last_loss", Json(r->losses.back())},
                           {"seconds", Json(r->seconds)},
                           {"tokens_per_second", Json(r->tokens_per_second)},
                           {"model_safetensors_sha256", Json(r->safetensors_sha256)}});
  std::printf("%s\n", kernelrl::DumpJson(out).c_str());
  return 0;
}
