#include "learner/model_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "learner/safetensors.h"

namespace kernelrl::learner {
namespace {

#define ASSIGN_OR_RETURN_CFG(lhs, expr) \
  {                                     \
    auto _r = (expr);                   \
    if (!_r.ok()) return _r.status();   \
    lhs = *_r;                          \
  }

absl::Status ParseRope(const Json& j, ModelConfig* c) {
  // transformers 5.x: rope_parameters {rope_type, rope_theta, ...};
  // 4.x: rope_theta at top level and rope_scaling {type|rope_type, factor, ...}.
  const Json* params = FindJson(j, "rope_parameters");
  const Json* scaling = FindJson(j, "rope_scaling");
  ASSIGN_OR_RETURN_CFG(c->rope_theta, GetJsonDouble(j, "rope_theta", 10000.0));
  const Json* s = nullptr;
  if (params != nullptr && params->is_object()) {
    ASSIGN_OR_RETURN_CFG(c->rope_theta, GetJsonDouble(*params, "rope_theta", c->rope_theta));
    s = params;
  } else if (scaling != nullptr && scaling->is_object()) {
    s = scaling;
  }
  if (s == nullptr) return absl::OkStatus();
  std::string type;
  ASSIGN_OR_RETURN_CFG(type, GetJsonString(*s, "rope_type", ""));
  if (type.empty()) ASSIGN_OR_RETURN_CFG(type, GetJsonString(*s, "type", "default"));
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn") {
    return absl::UnimplementedError(
        absl::StrCat("RoPE scaling \"", type, "\" is not supported (default, linear, llama3, yarn are)"));
  }
  RopeScaling& r = c->rope_scaling;
  r.type = type;
  ASSIGN_OR_RETURN_CFG(r.factor, GetJsonDouble(*s, "factor", 1.0));
  ASSIGN_OR_RETURN_CFG(r.low_freq_factor, GetJsonDouble(*s, "low_freq_factor", 1.0));
  ASSIGN_OR_RETURN_CFG(r.high_freq_factor, GetJsonDouble(*s, "high_freq_factor", 4.0));
  ASSIGN_OR_RETURN_CFG(r.original_max_position_embeddings,
                       GetJsonInt(*s, "original_max_position_embeddings", type == "yarn" ? c->max_position_embeddings : 8192));
  if (type == "yarn") {
    ASSIGN_OR_RETURN_CFG(r.beta_fast, GetJsonDouble(*s, "beta_fast", r.beta_fast));
    ASSIGN_OR_RETURN_CFG(r.beta_slow, GetJsonDouble(*s, "beta_slow", r.beta_slow));
    ASSIGN_OR_RETURN_CFG(r.attention_factor, GetJsonDouble(*s, "attention_factor", 0.0));
    ASSIGN_OR_RETURN_CFG(r.mscale, GetJsonDouble(*s, "mscale", 0.0));
    ASSIGN_OR_RETURN_CFG(r.mscale_all_dim, GetJsonDouble(*s, "mscale_all_dim", 0.0));
    // No factor: the ratio of the context lengths (transformers' rule).
    const double ratio = static_cast<double>(c->max_position_embeddings) /
                         static_cast<double>(std::max<int64_t>(1, r.original_max_position_embeddings));
    ASSIGN_OR_RETURN_CFG(r.factor, GetJsonDouble(*s, "factor", ratio));
    ASSIGN_OR_RETURN_CFG(r.truncate, GetJsonBool(*s, "truncate", true));
    if (r.original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError("yarn RoPE needs a positive original_max_position_embeddings");
    }
  }
  if (r.factor <= 0) return absl::InvalidArgumentError("RoPE scaling factor must be positive");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const Json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  ModelConfig c;
  c.original = j;
  ASSIGN_OR_RETURN_CFG(c.model_type, GetJsonString(j, "model_type", ""));
  if (c.model_type != "qwen2" && c.model_type != "llama") {
    return absl::UnimplementedError(absl::StrCat("model_type \"", c.model_type, "\" is not supported (qwen2, llama are)"));
  }
  ASSIGN_OR_RETURN_CFG(c.vocab_size, GetJsonInt(j, "vocab_size", 0));
  ASSIGN_OR_RETURN_CFG(c.hidden_size, GetJsonInt(j, "hidden_size", 0));
  ASSIGN_OR_RETURN_CFG(c.intermediate_size, GetJsonInt(j, "intermediate_size", 0));
  ASSIGN_OR_RETURN_CFG(c.num_layers, GetJsonInt(j, "num_hidden_layers", 0));
  ASSIGN_OR_RETURN_CFG(c.num_heads, GetJsonInt(j, "num_attention_heads", 0));
  ASSIGN_OR_RETURN_CFG(c.num_kv_heads, GetJsonInt(j, "num_key_value_heads", c.num_heads));
  if (c.num_heads <= 0 || c.hidden_size <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.intermediate_size <= 0) {
    return absl::InvalidArgumentError(
        "config.json needs positive vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads");
  }
  ASSIGN_OR_RETURN_CFG(c.head_dim, GetJsonInt(j, "head_dim", c.hidden_size / c.num_heads));
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("num_attention_heads must be a multiple of num_key_value_heads; head_dim even");
  }
  ASSIGN_OR_RETURN_CFG(c.max_position_embeddings, GetJsonInt(j, "max_position_embeddings", 32768));
  ASSIGN_OR_RETURN_CFG(c.rms_norm_eps, GetJsonDouble(j, "rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN_CFG(c.tie_word_embeddings, GetJsonBool(j, "tie_word_embeddings", c.model_type == "qwen2" ? false : false));
  std::string act;
  ASSIGN_OR_RETURN_CFG(act, GetJsonString(j, "hidden_act", "silu"));
  if (act != "silu") return absl::UnimplementedError(absl::StrCat("hidden_act \"", act, "\" is not supported (silu is)"));
  bool sliding = false;
  ASSIGN_OR_RETURN_CFG(sliding, GetJsonBool(j, "use_sliding_window", false));
  if (sliding) return absl::UnimplementedError("use_sliding_window=true is not supported");
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;
    c.o_bias = false;
    c.mlp_bias = false;
  } else {
    bool attn_bias = false;
    ASSIGN_OR_RETURN_CFG(attn_bias, GetJsonBool(j, "attention_bias", false));
    c.qkv_bias = c.o_bias = attn_bias;
    ASSIGN_OR_RETURN_CFG(c.mlp_bias, GetJsonBool(j, "mlp_bias", false));
  }
  if (auto s = ParseRope(j, &c); !s.ok()) return s;
  if (const Json* eos = FindJson(j, "eos_token_id"); eos != nullptr && !eos->is_null()) {
    if (eos->is_array()) {
      for (const Json& e : *eos) {
        auto v = JsonInt(e);
        if (!v.ok()) return absl::InvalidArgumentError("eos_token_id entries must be integers");
        c.eos_token_ids.push_back(*v);
      }
    } else {
      auto v = JsonInt(*eos);
      if (!v.ok()) return absl::InvalidArgumentError("eos_token_id must be an integer or a list");
      c.eos_token_ids.push_back(*v);
    }
  }
  ASSIGN_OR_RETURN_CFG(c.bos_token_id, GetJsonInt(j, "bos_token_id", -1));
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto json = ParseJson(*text);
  if (!json.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", json.status().message()));
  auto c = FromJson(*json);
  if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat(path, ": ", c.status().message()));
  return c;
}

Json ModelConfig::ToJson() const {
  Json j = original.is_object() ? original : Json::object();
  j["architectures"] = Json::array({Json(model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM")});
  j["model_type"] = Json(model_type);
  j["vocab_size"] = Json(vocab_size);
  j["hidden_size"] = Json(hidden_size);
  j["intermediate_size"] = Json(intermediate_size);
  j["num_hidden_layers"] = Json(num_layers);
  j["num_attention_heads"] = Json(num_heads);
  j["num_key_value_heads"] = Json(num_kv_heads);
  j["head_dim"] = Json(head_dim);
  j["max_position_embeddings"] = Json(max_position_embeddings);
  j["rms_norm_eps"] = Json(rms_norm_eps);
  j["hidden_act"] = Json("silu");
  j["tie_word_embeddings"] = Json(tie_word_embeddings);
  if (model_type == "llama") {
    j["attention_bias"] = Json(qkv_bias);
    j["mlp_bias"] = Json(mlp_bias);
  }
  // Written in both the 4.x and the 5.x spelling so either reader finds it.
  j["rope_theta"] = Json(rope_theta);
  Json rope = Json::object();
  rope["rope_type"] = Json(rope_scaling.type);
  rope["rope_theta"] = Json(rope_theta);
  if (rope_scaling.type != "default") {
    rope["factor"] = Json(rope_scaling.factor);
    if (rope_scaling.type == "llama3" || rope_scaling.type == "yarn") {
      rope["original_max_position_embeddings"] = Json(rope_scaling.original_max_position_embeddings);
    }
    if (rope_scaling.type == "yarn") {
      rope["beta_fast"] = Json(rope_scaling.beta_fast);
      rope["beta_slow"] = Json(rope_scaling.beta_slow);
      rope["truncate"] = Json(rope_scaling.truncate);
      if (rope_scaling.attention_factor > 0) rope["attention_factor"] = Json(rope_scaling.attention_factor);
      if (rope_scaling.mscale > 0) rope["mscale"] = Json(rope_scaling.mscale);
      if (rope_scaling.mscale_all_dim > 0) rope["mscale_all_dim"] = Json(rope_scaling.mscale_all_dim);
    }
    if (rope_scaling.type == "llama3") {
      rope["low_freq_factor"] = Json(rope_scaling.low_freq_factor);
      rope["high_freq_factor"] = Json(rope_scaling.high_freq_factor);
    }
  }
  j["rope_parameters"] = rope;
  if (rope_scaling.type != "default") {
    Json legacy = rope;
    legacy["type"] = Json(rope_scaling.type);
    j["rope_scaling"] = legacy;
  } else {
    j["rope_scaling"] = Json();
  }
  if (!eos_token_ids.empty()) {
    if (eos_token_ids.size() == 1) {
      j["eos_token_id"] = Json(eos_token_ids[0]);
    } else {
      Json a = Json::array();
      for (int64_t e : eos_token_ids) a.push_back(Json(e));
      j["eos_token_id"] = a;
    }
  }
  if (bos_token_id >= 0) j["bos_token_id"] = Json(bos_token_id);
  return j;
}

int64_t ModelConfig::ParameterCount() const {
  const int64_t q = num_heads * head_dim, kv = num_kv_heads * head_dim;
  int64_t attn = hidden_size * q + 2 * hidden_size * kv + q * hidden_size;
  if (qkv_bias) attn += q + 2 * kv;
  if (o_bias) attn += hidden_size;
  int64_t mlp = 3 * hidden_size * intermediate_size;
  if (mlp_bias) mlp += 2 * intermediate_size + hidden_size;
  int64_t layer = attn + mlp + 2 * hidden_size;
  int64_t emb = vocab_size * hidden_size;
  return num_layers * layer + hidden_size + emb + (tie_word_embeddings ? 0 : emb);
}

int64_t ModelConfig::AdapterParametersPerLayer(int64_t rank) const {
  const int64_t H = hidden_size, Q = num_heads * head_dim, KV = num_kv_heads * head_dim, I = intermediate_size;
  return rank * ((H + Q + 2 * KV) + (Q + H) + (H + 2 * I) + (I + H));
}

}  // namespace kernelrl::learner
