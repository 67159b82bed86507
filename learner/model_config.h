// The shape of a Llama/Qwen2-family decoder, read from and written to a
// Hugging Face config.json.
//
// Contract: FromJson accepts model_type "qwen2" and "llama" (transformers
// 4.x top-level rope_theta/rope_scaling, or 5.x rope_parameters) and rejects
// what the model cannot run exactly (sliding-window attention, yarn/dynamic
// RoPE, activations other than silu) instead of silently approximating it.
// The original JSON is kept, so ToJson() writes back every field we do not
// interpret and a checkpoint we save loads in vLLM / transformers unchanged.
#ifndef KERNELRL_LEARNER_MODEL_CONFIG_H_
#define KERNELRL_LEARNER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace kernelrl::learner {

struct RopeScaling {
  std::string type = "default";  // "default", "linear", "llama3", "yarn".
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3 only.
  double high_freq_factor = 4.0;  // llama3 only.
  // llama3 and yarn (yarn's default: max_position_embeddings).
  int64_t original_max_position_embeddings = 8192;
  // yarn only (transformers' defaults): the rotation counts bounding the
  // ramp between interpolated and extrapolated frequencies, whether its
  // bounds are rounded outwards, and the cos/sin scale (0 = from factor,
  // mscale and mscale_all_dim as the YaRN paper suggests).
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 0.0;
  double mscale = 0.0, mscale_all_dim = 0.0;
};

struct ModelConfig {
  std::string model_type = "qwen2";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = true;   // Qwen2: always; Llama: attention_bias.
  bool o_bias = false;    // Llama: attention_bias.
  bool mlp_bias = false;  // Llama: mlp_bias.
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;

  static absl::StatusOr<ModelConfig> FromJson(const Json& json);
  static absl::StatusOr<ModelConfig> Load(const std::string& config_json_path);
  // config.json content: the loaded JSON with our fields written over it.
  Json ToJson() const;
  int64_t ParameterCount() const;  // Trunk + head, counting tied weights once.
  // Elements of one layer's LoRA adapters of rank r (learner/model.h): A [r, in]
  // and B [out, r] on the fused q/k/v, o, the fused gate/up and down.
  int64_t AdapterParametersPerLayer(int64_t rank) const;

  Json original;  // As read (empty object for configs built in code).
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_MODEL_CONFIG_H_
