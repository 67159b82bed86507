// Model shapes the GPU benchmarks build with random weights: Qwen2.5's
// published sizes, and a tiny one for their CPU smoke runs.
#ifndef KERNELRL_LEARNER_BENCH_SHAPES_H_
#define KERNELRL_LEARNER_BENCH_SHAPES_H_

#include <string>

#include "learner/model_config.h"

namespace kernelrl::learner::bench {

// "qwen2.5-7b", "qwen2.5-1.5b", "qwen2.5-0.5b" (anything else), "tiny", and
// "codemodel": docs/CODEMODEL.md's from-scratch model (its base's config.json).
inline ModelConfig Shape(const std::string& name) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 152064;
  c.max_position_embeddings = 131072;
  c.rope_theta = 1000000.0;
  if (name == "qwen2.5-7b") {
    c.hidden_size = 3584, c.intermediate_size = 18944, c.num_layers = 28, c.num_heads = 28, c.num_kv_heads = 4;
  } else if (name == "qwen2.5-1.5b") {
    c.vocab_size = 151936, c.tie_word_embeddings = true;
    c.hidden_size = 1536, c.intermediate_size = 8960, c.num_layers = 28, c.num_heads = 12, c.num_kv_heads = 2;
  } else if (name == "tiny") {  // The CPU smoke runs.
    c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 128, c.num_layers = 2, c.num_heads = 4;
    c.num_kv_heads = 2;
  } else if (name == "codemodel") {  // pretrain's --hidden=256 --layers=4 --heads=4 --kv_heads=2 --intermediate=704
    c.vocab_size = 2509, c.hidden_size = 256, c.intermediate_size = 704, c.num_layers = 4, c.num_heads = 4;
    c.num_kv_heads = 2, c.rope_theta = 100000.0, c.max_position_embeddings = 32768;
  } else {  // qwen2.5-0.5b
    c.vocab_size = 151936, c.tie_word_embeddings = true;
    c.hidden_size = 896, c.intermediate_size = 4864, c.num_layers = 24, c.num_heads = 14, c.num_kv_heads = 2;
  }
  c.head_dim = c.hidden_size / c.num_heads;
  return c;
}

}  // namespace kernelrl::learner::bench

#endif  // KERNELRL_LEARNER_BENCH_SHAPES_H_
