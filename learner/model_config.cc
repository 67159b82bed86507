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
  const Json* params = j.Find("rope_parameters");
  const Json* scaling = j.Find("rope_scaling");
  ASSIGN_OR_RETURN_CFG(c->rope_theta, j.GetDouble("rope_theta", 10000.0));
  const Json* s = nullptr;
  if (params != nullptr && params->is_object()) {
    ASSIGN_OR_RETURN_CFG(c->rope_theta, params->GetDouble("rope_theta", c->rope_theta));
    s = params;
  } else if (scaling != nullptr && scaling->is_object()) {
    s = scaling;
  }
  if (s == nullptr) return absl::OkStatus();
  std::string type;
  ASSIGN_OR_RETURN_CFG(type, s->GetString("rope_type", ""));
  if (type.empty()) ASSIGN_OR_RETURN_CFG(type, s->GetString("type", "default"));
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn") {
    return absl::UnimplementedError(
        absl::StrCat("RoPE scaling \"", type, "\" is not supported (default, linear, llama3, yarn are)"));
  }
  RopeScaling& r = c->rope_scaling;
  r.type = type;
  ASSIGN_OR_RETURN_CFG(r.factor, s->GetDouble("factor", 1.0));
  ASSIGN_OR_RETURN_CFG(r.low_freq_factor, s->GetDouble("low_freq_factor", 1.0));
  ASSIGN_OR_RETURN_CFG(r.high_freq_factor, s->GetDouble("high_freq_factor", 4.0));
  ASSIGN_OR_RETURN_CFG(r.original_max_position_embeddings,
                       s->GetInt("original_max_position_embeddings", type == "yarn" ? c->max_position_embeddings : 8192));
  if (type == "yarn") {
    ASSIGN_OR_RETURN_CFG(r.beta_fast, s->GetDouble("beta_fast", r.beta_fast));
    ASSIGN_OR_RETURN_CFG(r.beta_slow, s->GetDouble("beta_slow", r.beta_slow));
    ASSIGN_OR_RETURN_CFG(r.attention_factor, s->GetDouble("attention_factor", 0.0));
    ASSIGN_OR_RETURN_CFG(r.mscale, s->GetDouble("mscale", 0.0));
    ASSIGN_OR_RETURN_CFG(r.mscale_all_dim, s->GetDouble("mscale_all_dim", 0.0));
    // No factor: the ratio of the context lengths (transformers' rule).
    const double ratio = static_cast<double>(c->max_position_embeddings) /
                         static_cast<double>(std::max<int64_t>(1, r.original_max_position_embeddings));
    ASSIGN_OR_RETURN_CFG(r.factor, s->GetDouble("factor", ratio));
    ASSIGN_OR_RETURN_CFG(r.truncate, s->GetBool("truncate", true));
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
  ASSIGN_OR_RETURN_CFG(c.model_type, j.GetString("model_type", ""));
  if (c.model_type != "qwen2" && c.model_type != "llama") {
    return absl::UnimplementedError(absl::StrCat("model_type \"", c.model_type, "\" is not supported (qwen2, llama are)"));
  }
  ASSIGN_OR_RETURN_CFG(c.vocab_size, j.GetInt("vocab_size", 0));
  ASSIGN_OR_RETURN_CFG(c.hidden_size, j.GetInt("hidden_size", 0));
  ASSIGN_OR_RETURN_CFG(c.intermediate_size, j.GetInt("intermediate_size", 0));
  ASSIGN_OR_RETURN_CFG(c.num_layers, j.GetInt("num_hidden_layers", 0));
  ASSIGN_OR_RETURN_CFG(c.num_heads, j.GetInt("num_attention_heads", 0));
  ASSIGN_OR_RETURN_CFG(c.num_kv_heads, j.GetInt("num_key_value_heads", c.num_heads));
  if (c.num_heads <= 0 || c.hidden_size <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.intermediate_size <= 0) {
    return absl::InvalidArgumentError(
        "config.json needs positive vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads");
  }
  ASSIGN_OR_RETURN_CFG(c.head_dim, j.GetInt("head_dim", c.hidden_size / c.num_heads));
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("num_attention_heads must be a multiple of num_key_value_heads; head_dim even");
  }
  ASSIGN_OR_RETURN_CFG(c.max_position_embeddings, j.GetInt("max_position_embeddings", 32768));
  ASSIGN_OR_RETURN_CFG(c.rms_norm_eps, j.GetDouble("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN_CFG(c.tie_word_embeddings, j.GetBool("tie_word_embeddings", c.model_type == "qwen2" ? false : false));
  std::string act;
  ASSIGN_OR_RETURN_CFG(act, j.GetString("hidden_act", "silu"));
  if (act != "silu") return absl::UnimplementedError(absl::StrCat("hidden_act \"", act, "\" is not supported (silu is)"));
  bool sliding = false;
  ASSIGN_OR_RETURN_CFG(sliding, j.GetBool("use_sliding_window", false));
  if (sliding) return absl::UnimplementedError("use_sliding_window=true is not supported");
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;
    c.o_bias = false;
    c.mlp_bias = false;
  } else {
    bool attn_bias = false;
    ASSIGN_OR_RETURN_CFG(attn_bias, j.GetBool("attention_bias", false));
    c.qkv_bias = c.o_bias = attn_bias;
    ASSIGN_OR_RETURN_CFG(c.mlp_bias, j.GetBool("mlp_bias", false));
  }
  if (auto s = ParseRope(j, &c); !s.ok()) return s;
  if (const Json* eos = j.Find("eos_token_id"); eos != nullptr && !eos->is_null()) {
    if (eos->is_array()) {
      for (const Json& e : eos->items()) {
        auto v = e.AsInt();
        if (!v.ok()) return absl::InvalidArgumentError("eos_token_id entries must be integers");
        c.eos_token_ids.push_back(*v);
      }
    } else {
      auto v = eos->AsInt();
      if (!v.ok()) return absl::InvalidArgumentError("eos_token_id must be an integer or a list");
      c.eos_token_ids.push_back(*v);
    }
  }
  ASSIGN_OR_RETURN_CFG(c.bos_token_id, j.GetInt("bos_token_id", -1));
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
  Json j = original.is_object() ? original : Json::Object();
  j.Set("architectures", Json::Array({Json::String(model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM")}));
  j.Set("model_type", Json::String(model_type));
  j.Set("vocab_size", Json::Int(vocab_size));
  j.Set("hidden_size", Json::Int(hidden_size));
  j.Set("intermediate_size", Json::Int(intermediate_size));
  j.Set("num_hidden_layers", Json::Int(num_layers));
  j.Set("num_attention_heads", Json::Int(num_heads));
  j.Set("num_key_value_heads", Json::Int(num_kv_heads));
  j.Set("head_dim", Json::Int(head_dim));
  j.Set("max_position_embeddings", Json::Int(max_position_embeddings));
  j.Set("rms_norm_eps", Json::Number(rms_norm_eps));
  j.Set("hidden_act", Json::String("silu"));
  j.Set("tie_word_embeddings", Json::Bool(tie_word_embeddings));
  if (model_type == "llama") {
    j.Set("attention_bias", Json::Bool(qkv_bias));
    j.Set("mlp_bias", Json::Bool(mlp_bias));
  }
  // Written in both the 4.x and the 5.x spelling so either reader finds it.
  j.Set("rope_theta", Json::Number(rope_theta));
  Json rope = Json::Object();
  rope.Set("rope_type", Json::String(rope_scaling.type));
  rope.Set("rope_theta", Json::Number(rope_theta));
  if (rope_scaling.type != "default") {
    rope.Set("factor", Json::Number(rope_scaling.factor));
    if (rope_scaling.type == "llama3" || rope_scaling.type == "yarn") {
      rope.Set("original_max_position_embeddings", Json::Int(rope_scaling.original_max_position_embeddings));
    }
    if (rope_scaling.type == "yarn") {
      rope.Set("beta_fast", Json::Number(rope_scaling.beta_fast));
      rope.Set("beta_slow", Json::Number(rope_scaling.beta_slow));
      rope.Set("truncate", Json::Bool(rope_scaling.truncate));
      if (rope_scaling.attention_factor > 0) rope.Set("attention_factor", Json::Number(rope_scaling.attention_factor));
      if (rope_scaling.mscale > 0) rope.Set("mscale", Json::Number(rope_scaling.mscale));
      if (rope_scaling.mscale_all_dim > 0) rope.Set("mscale_all_dim", Json::Number(rope_scaling.mscale_all_dim));
    }
    if (rope_scaling.type == "llama3") {
      rope.Set("low_freq_factor", Json::Number(rope_scaling.low_freq_factor));
      rope.Set("high_freq_factor", Json::Number(rope_scaling.high_freq_factor));
    }
  }
  j.Set("rope_parameters", rope);
  if (rope_scaling.type != "default") {
    Json legacy = rope;
    legacy.Set("type", Json::String(rope_scaling.type));
    j.Set("rope_scaling", legacy);
  } else {
    j.Set("rope_scaling", Json::Null());
  }
  if (!eos_token_ids.empty()) {
    if (eos_token_ids.size() == 1) {
      j.Set("eos_token_id", Json::Int(eos_token_ids[0]));
    } else {
      Json a = Json::Array();
      for (int64_t e : eos_token_ids) a.Push(Json::Int(e));
      j.Set("eos_token_id", a);
    }
  }
  if (bos_token_id >= 0) j.Set("bos_token_id", Json::Int(bos_token_id));
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

}  // namespace kernelrl::learner
