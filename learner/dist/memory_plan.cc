#include "learner/dist/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kernelrl::learner::dist {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Elements of one block's weights.
int64_t BlockParams(const ModelConfig& c) {
  const int64_t H = c.hidden_size, Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
  const int64_t I = c.intermediate_size;
  int64_t n = H * (Q + 2 * KV) + Q * H + 3 * H * I + 2 * H;
  if (c.qkv_bias) n += Q + 2 * KV;
  if (c.o_bias) n += H;
  if (c.mlp_bias) n += 2 * I + H;
  return n;
}

// Elements outside the blocks: embedding, final norm, the head.
int64_t RootParams(const ModelConfig& c, bool value_head) {
  const int64_t emb = c.vocab_size * c.hidden_size;
  return emb + c.hidden_size + (value_head ? c.hidden_size + 1 : (c.tie_word_embeddings ? 0 : emb));
}

// Elements autograd saves per token in one block's forward (only what a
// backward needs: a product with cos/sin keeps neither factor). CUDA (fused
// RMSNorm, RoPE and SwiGLU kernels): the block input, the two norms'
// outputs, q/k/v, attention output and its [T,Q] copy, the residual, gate/up
// and the activation. CPU (eager ops): also each norm's normalised input,
// q/k/v before RoPE (v is a view of it) and SiLU's output.
// Adapters of rank r save each projection's x A^T: 4 r more.
int64_t BlockActivationPerToken(const ModelConfig& c, bool cuda, int64_t r) {
  const int64_t H = c.hidden_size, Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
  const int64_t I = c.intermediate_size;
  if (cuda) return 4 * H + (Q + 2 * KV) + 2 * Q + 3 * I + 4 * r;
  return 6 * H + (Q + 2 * KV) + (Q + KV) + 2 * Q + 4 * I + 4 * r;
}

// One model's bytes by phase. Gradients appear during backward as the
// activations go, so the peak is either at the end of the forward pass
// (every activation, no gradient yet) or inside backward (every gradient,
// the checkpointed block inputs and one block recomputed).
struct ModelPlan {
  int64_t host = 0;          // Pinned host memory (moments, offloaded layer inputs).
  int64_t persistent = 0;    // Weights, masters, moments: the whole step.
  int64_t saved = 0;         // Activations at the end of the forward pass.
  int64_t forward_peak = 0;  // The largest buffer on top of them then.
  int64_t grads = 0;         // Gradients, complete by the end of backward.
  int64_t inputs = 0;        // Checkpointed block inputs (kept through backward).
  int64_t backward_peak = 0;  // The largest working set of one block in backward.
  int64_t step_extra = 0;     // Only while the optimizer steps.
  std::vector<std::pair<std::string, int64_t>> items;
};

ModelPlan PlanModel(const std::string& name, const ModelConfig& c, bool value_head, int64_t lora,
                    const PlanOptions& o) {
  ModelPlan p;
  const int64_t b = o.cuda ? 2 : 4;  // Compute dtype bytes.
  const int64_t W = o.sharded ? std::max(1, o.world_size) : 1;
  const int64_t L = c.num_layers, H = c.hidden_size, T = o.tokens, V = c.vocab_size;
  const int64_t B = BlockParams(c), R = RootParams(c, value_head), P = R + L * B;
  auto add = [&](const std::string& what, int64_t bytes, int64_t* into) {
    p.items.emplace_back(absl::StrCat(name, ": ", what), bytes);
    *into += bytes;
  };
  const int64_t block = BlockActivationPerToken(c, o.cuda, lora) * T * b;
  if (lora > 0) {
    // Trainable: each block's adapters and a value model's head; the rest frozen.
    const int64_t A = c.AdapterParametersPerLayer(lora), head = value_head ? H + 1 : 0;
    const int64_t S = CeilDiv(head, W) + L * CeilDiv(A, W);  // Trainable elements on this rank.
    if (o.sharded) {
      add("frozen base shards", b * (CeilDiv(R - head, W) + L * CeilDiv(B, W)), &p.persistent);
      add("gathered root (embedding, norm, head)", b * R, &p.persistent);
      if (!o.activation_checkpointing) add("gathered blocks (all, kept for backward)", L * b * (B + A), &p.saved);
      // A block in backward and the one prefetched; the adapters' gradient, fp32 copy and the one in flight.
      p.backward_peak = 2 * b * (B + A) + b * A + 8 * A;
    } else {
      add("frozen weights", b * P, &p.persistent);
      add("adapter weights", b * L * A, &p.persistent);
    }
    const bool host_moments = o.offload_moments && o.cuda && o.sharded;
    add(host_moments ? "fp32 adapter masters (AdamW moments in host memory)" : "fp32 adapter masters + AdamW moments",
        (host_moments ? 4 : 12) * S, &p.persistent);
    if (host_moments) p.host += 8 * S;
    add("adapter gradients", 4 * S, &p.grads);
  } else if (o.sharded) {
    const int64_t S = CeilDiv(R, W) + L * CeilDiv(B, W);
    if (o.offload_moments && o.cuda) {
      add("fp32 master shards (AdamW moments in host memory)", 4 * S, &p.persistent);
      p.host += 8 * S;
      // Step: one unit's moments on the GPU at a time.
      p.step_extra = 8 * std::max(CeilDiv(R, W), CeilDiv(B, W));
    } else {
      add("fp32 master shards + AdamW moments", 12 * S, &p.persistent);
    }
    add("fp32 gradient shards", 4 * S, &p.grads);
    add("gathered root (embedding, norm, head)", b * R, &p.persistent);
    if (!o.activation_checkpointing) add("gathered blocks (all, kept for backward)", L * b * B, &p.saved);
    // A block in backward: its gathered weights, their gradient, the fp32
    // copy reduced, the one in flight, the block before it prefetched.
    p.backward_peak = 2 * b * B + (b == 4 ? 0 : 4 * B) + 4 * B + b * B;
  } else {
    add("weights", b * P, &p.persistent);
    if (b != 4) add("fp32 master weights", 4 * P, &p.persistent);
    add("AdamW moments", 8 * P, &p.persistent);
    add("gradients", b * P, &p.grads);
    if (b != 4) p.step_extra = 4 * P;  // AdamW::Step's fp32 copies of the gradients.
  }
  if (o.activation_checkpointing) {
    if (o.offload_activations && o.cuda) {
      add("activations: block inputs (the rest in host memory)", 2 * T * H * b, &p.inputs);
      p.host += std::max<int64_t>(0, L - 2) * T * H * b;
    } else {
      add("activations: block inputs", L * T * H * b, &p.inputs);
    }
    p.backward_peak += block;  // The block recomputed.
    // Its SwiGLU backward: the gradients of gate/up [T,2I] and of the
    // activation [T,I] (measured at the peak of a 7B LoRA step on an H200;
    // in full training the weight-gradient buffers above cover that moment).
    if (lora > 0) p.backward_peak += 3 * c.intermediate_size * T * b;
  } else {
    add("activations: blocks", L * block, &p.saved);
  }
  add("activations: final norm, hidden", 3 * T * H * b, &p.saved);
  if (!value_head) {
    const bool keep = T * V * b <= o.keep_logits_bytes;
    if (keep) add("logits kept for backward", T * V * b, &p.saved);
    // The entropy metric: logits, exp and product of a chunk of rows, fp32.
    const int64_t entropy_rows = std::min<int64_t>(T, std::max<int64_t>(1, (int64_t{128} << 20) / V));
    p.forward_peak = 3 * entropy_rows * V * 4;
    if (!keep) p.backward_peak = std::max(p.backward_peak, 2 * std::min<int64_t>(T, 4096) * V * b);
  }
  return p;
}

}  // namespace

MemoryPlan PlanMemory(const ModelConfig& actor, const ModelConfig* critic, const PlanOptions& o) {
  MemoryPlan plan;
  plan.device_bytes = o.device_bytes;
  plan.host_limit_bytes = o.host_limit_bytes;
  std::vector<ModelPlan> models = {PlanModel("actor", actor, false, o.actor_lora_rank, o)};
  if (critic != nullptr) models.push_back(PlanModel("critic", *critic, true, o.critic_lora_rank, o));
  ModelPlan sum;
  for (const ModelPlan& m : models) {
    plan.items.insert(plan.items.end(), m.items.begin(), m.items.end());
    sum.persistent += m.persistent, sum.saved += m.saved, sum.grads += m.grads, sum.inputs += m.inputs;
    plan.host_bytes += m.host;
    sum.forward_peak = std::max(sum.forward_peak, m.forward_peak);
    sum.backward_peak = std::max(sum.backward_peak, m.backward_peak);
    sum.step_extra = std::max(sum.step_extra, m.step_extra);
  }
  // Both models' activations live until the one backward over the summed loss.
  const int64_t forward_end = sum.inputs + sum.saved + sum.forward_peak;
  const int64_t backward = sum.grads + sum.inputs + sum.backward_peak;
  const int64_t step = sum.grads + sum.step_extra;
  const int64_t phase = std::max({forward_end, backward, step});
  const char* when = phase == forward_end ? "end of forward" : phase == backward ? "in backward" : "optimizer step";
  plan.items.emplace_back(absl::StrCat("peak phase: ", when, " (gradients, activations alive then, largest buffer)"),
                          phase);
  if (o.cuda) plan.items.emplace_back("CUDA context, workspaces, NCCL (reserved)", o.reserved_bytes);
  plan.total = sum.persistent + phase + (o.cuda ? o.reserved_bytes : 0);
  return plan;
}

std::string MemoryPlan::Table() const {
  std::string out;
  for (const auto& [what, bytes] : items) {
    absl::StrAppendFormat(&out, "  %-80s %12.1f MiB\n", what, static_cast<double>(bytes) / (1 << 20));
  }
  absl::StrAppendFormat(&out, "  %-80s %12.1f MiB (%.2f GiB of %.2f GiB: %s)\n", "total per GPU (persistent + peak phase)",
                        static_cast<double>(total) / (1 << 20), static_cast<double>(total) / (1 << 30),
                        static_cast<double>(device_bytes) / (1 << 30), total <= device_bytes ? "fits" : "DOES NOT FIT");
  if (host_bytes > 0) {
    absl::StrAppendFormat(&out, "  %-80s %12.1f MiB\n", "pinned host memory per rank (moments, offloaded layer inputs)",
                          static_cast<double>(host_bytes) / (1 << 20));
  }
  return out;
}

absl::Status CheckFits(const MemoryPlan& plan) {
  if (plan.host_limit_bytes > 0 && plan.host_bytes > plan.host_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the job needs %.2f GiB of pinned host memory per rank (AdamW moments, offloaded layer inputs), the host "
        "allows %.2f GiB; shard over more GPUs or hosts, or shorten the rows",
        static_cast<double>(plan.host_bytes) / (1 << 30), static_cast<double>(plan.host_limit_bytes) / (1 << 30)));
  }
  if (plan.total <= plan.device_bytes) return absl::OkStatus();
  std::vector<std::pair<std::string, int64_t>> items = plan.items;
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string largest;
  for (size_t i = 0; i < std::min<size_t>(3, items.size()); ++i) {
    absl::StrAppendFormat(&largest, "%s%s %.2f GiB", i ? ", " : "", items[i].first,
                          static_cast<double>(items[i].second) / (1 << 30));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the job needs %.2f GiB per GPU, the GPU has %.2f GiB (largest: %s); shard over more GPUs, turn on "
      "activation checkpointing or shorten the rows",
      static_cast<double>(plan.total) / (1 << 30), static_cast<double>(plan.device_bytes) / (1 << 30), largest));
}

}  // namespace kernelrl::learner::dist
