// A Llama/Qwen2-family decoder written directly on ATen ops, one definition
// for training, scoring and cached generation, on CPU (fp32) and CUDA (bf16).
//
//   ids [B,T] -> embed -> L x { x += o(attn(rope(qkv(norm(x)))));
//                               x += down(silu(gate(norm(x))) * up(norm(x))) }
//             -> norm -> head
//
// Contract:
//  * Weights load from / save to Hugging Face checkpoints (config.json +
//    safetensors, single file or sharded) with HF tensor names, so a
//    checkpoint we write loads in transformers or vLLM unchanged. Internally
//    q/k/v and gate/up are fused into one matrix each (fewer, larger GEMMs);
//    Save() splits them back.
//  * Head::kLanguageModel ends in lm_head (tied to the embedding when the
//    config says so); Head::kValue ends in a scalar value head "score"
//    (the critic: same trunk shape, its own weights).
//  * Every forward is differentiable through ATen autograd; parameters()
//    are leaf tensors with requires_grad when the model is trainable.
//  * Methods are not thread-safe: one thread drives a model at a time.
//    Weights are never mutated after load except by an optimizer the caller
//    runs, so a policy server swaps whole models rather than patching one.
#ifndef KERNELRL_LEARNER_MODEL_H_
#define KERNELRL_LEARNER_MODEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "learner/model_config.h"

namespace torch::autograd {
struct AutogradContext;
}  // namespace torch::autograd

namespace kernelrl::learner {

enum class Head { kLanguageModel, kValue };

struct ModelOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;  // bf16 on GPU, fp32 on CPU.
  bool trainable = false;             // Parameters require grad.
  // Recompute each layer's activations in backward instead of storing them
  // (long sequences: trades ~1/3 more compute for O(1) layers of memory).
  bool activation_checkpointing = false;
  // Fused kernels (learner/fused_ops.h) for RoPE + q/k/v split and SwiGLU
  // on CUDA, paged decode attention (learner/paged_decode.h) on CUDA, and
  // token log-probs everywhere; false runs the eager ATen ops instead (the
  // reference the benchmarks compare against).
  bool fused_kernels = true;
  // Token log-probs keep the [tokens, vocab] logits for backward up to this
  // size (8K tokens x 152K vocab in bf16 = 2.5 GB); beyond it backward
  // recomputes them chunk by chunk (one more lm_head GEMM, O(chunk) memory).
  int64_t keep_logits_bytes = int64_t{4} << 30;
  // Random init drawn by the model device's own generator (seeded the same):
  // a CUDA model of billions of parameters is drawn in seconds instead of
  // minutes on the CPU, at the price of numbers that differ from the CPU
  // draw. Off, every device gets the CPU's numbers.
  bool draw_on_device = false;
  // With activation checkpointing on CUDA: each block's saved input waits in
  // pinned host memory between the forward pass and the block's backward
  // (copied out and back on the compute stream), so a long sequence keeps
  // O(1) block inputs on the GPU instead of one per layer.
  bool offload_activations = false;
  // LoRA adapters (Hu et al. 2021) on every projection of every block: the
  // fused q/k/v (one A shared by q, k and v), o, the fused gate/up and down
  // compute W x + (lora_alpha / lora_rank) B A x. A [rank, in] is drawn as
  // PEFT draws it (uniform within 1/sqrt(in)) from lora_seed and B [out, rank]
  // starts at zero, so fresh adapters leave the model's outputs unchanged.
  // With lora_rank > 0 only the adapters (and a value model's head) are
  // parameters(); the base weights stay frozen. 0: no adapters.
  int64_t lora_rank = 0;
  double lora_alpha = 0;  // 0: 2 x lora_rank.
  uint64_t lora_seed = 0;
};

// Whether this process's CUDA models may use cuDNN's attention (torch's first choice on Hopper
// and Blackwell). Off unless allowed: making a model on CUDA turns cuDNN's SDPA backend off for the
// process, since it builds and caches a graph for every new sequence shape, forward and backward,
// and RL trains and prefills sequences of every length (on an H200 a value step on 8 trajectories
// of new lengths took 1.1-1.3 s with it, 0.05 s without); flash attention serves instead.
// Allowed (LearnerConfig.sdpa_cudnn), torch's own choice stands: faster at one fixed length (1.6x
// for attention at 8K on the H100). Process-wide: call before the first CUDA model is made.
void AllowCudnnAttention(bool allow);

// Options for a device and dtype named in a config ("cpu", "cuda[:N]";
// "float32", "bfloat16", empty: bf16 on CUDA, fp32 on the CPU): what the
// policy engine serves in.
absl::StatusOr<ModelOptions> ModelOptionsFor(const std::string& device, const std::string& dtype);

// Keys and values of every layer for `slots` independent sequences of up to
// `capacity` positions: k[l], v[l] are [slots, kv_heads, capacity, head_dim].
class Transformer;

// The weights outside the layers: embedding, final norm and the head of the
// model's kind (lm_head, the same tensor as embed when tied; or the value
// head score_w [1,H], score_b [1]).
struct RootWeights {
  at::Tensor embed;       // [V, H]
  at::Tensor final_norm;  // [H]
  at::Tensor lm_head;     // [V, H]
  at::Tensor score_w, score_b;
};

// Where a model's weights live when they are not resident on every rank
// (fully sharded data parallelism: learner/dist/fsdp.h). The training and
// scoring forward asks it for the root weights at the start of each pass
// and hands it each block; the provider gathers what the pass needs and
// routes gradients back into its own parameters(). Generation
// (Prefill/Decode) needs resident weights.
class WeightProvider {
 public:
  virtual ~WeightProvider() = default;
  // The root weights for one forward pass, differentiable into parameters().
  virtual RootWeights Root() = 0;
  // Block `layer` of the forward on x [B,T,H] (checkpointed when the
  // model's options say so).
  virtual at::Tensor Block(const Transformer& model, int layer, const at::Tensor& x, const at::Tensor& cos,
                           const at::Tensor& sin, const std::vector<int64_t>& lengths) = 0;
  // The trainable leaves standing in for the weights (an optimizer's).
  virtual std::vector<at::Tensor> parameters() const = 0;
};

struct KVCache {
  KVCache(const ModelConfig& config, int64_t slots, int64_t capacity, at::TensorOptions options);
  std::vector<at::Tensor> k, v;
  int64_t slots;
  int64_t capacity;
};

// Paged keys and values (the policy engine's cache): k[l], v[l] are
// [kv_heads, num_blocks, block_size, head_dim]. Position p of a sequence
// lives in block table[p / block_size] at offset p % block_size; which
// blocks a sequence owns is the caller's bookkeeping
// (learner/policy/kv_blocks.h). Heads lead so that gathering a sequence's
// blocks is one index_select whose result is already the [kv_heads, L, D]
// the attention GEMMs read.
struct PagedKVCache {
  PagedKVCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size, at::TensorOptions options);
  std::vector<at::Tensor> k, v;
  int64_t num_blocks;
  int64_t block_size;
};

// One forward over a PagedKVCache: sequence i has starts[i] positions in
// the cache already and brings lengths[i] new tokens, which land at
// positions [starts[i], starts[i] + lengths[i]); block_tables[i] covers at
// least starts[i] + lengths[i] positions.
struct PagedBatch {
  std::vector<int64_t> starts;
  std::vector<int64_t> lengths;
  std::vector<std::vector<int32_t>> block_tables;
};

class Transformer {
 public:
  // Fresh weights drawn like transformers' _init_weights (normal(0, 0.02),
  // zero biases, unit norms) from `seed`.
  static absl::StatusOr<std::unique_ptr<Transformer>> Create(const ModelConfig& config, Head head,
                                                             const ModelOptions& options, uint64_t seed);
  // Reads <dir>/config.json and the safetensors weights. Missing, misshapen
  // or unexpected tensors are errors naming the tensor. Head::kValue on a
  // language-model checkpoint (no score.weight) takes the trunk and starts a
  // zero value head: the critic initialised from the base model.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const std::string& dir, Head head,
                                                           const ModelOptions& options);
  // A model on the given weights (shapes as the config implies; tied
  // lm_head left undefined): what a sharded model consolidates into.
  static absl::StatusOr<std::unique_ptr<Transformer>> FromWeights(const ModelConfig& config, Head head,
                                                                  const ModelOptions& options, RootWeights root,
                                                                  std::vector<at::Tensor> layer_fields);
  // Writes config.json and model.safetensors (sharded past 4 GiB) into an
  // existing directory; each file lands atomically. A model with adapters
  // writes its base weights there and the adapters beside them as PEFT does
  // (adapter_config.json, adapter_model.safetensors: q/k/v and gate/up split
  // back out, so q, k and v each carry the shared A): lossless, and Load()
  // of the directory merges them unless it is asked for adapters.
  absl::Status Save(const std::string& dir) const;
  // Writes the weights with the adapters folded in (W + scale B A) and no
  // adapter files: what an engine that knows nothing of LoRA loads.
  absl::Status SaveMerged(const std::string& dir) const;
  // Folds the adapters into the base weights and drops them (no-op without).
  void MergeAdapters();
  // A resident copy of this model's weights (adapters folded in) on
  // options.device in options.dtype, sharing no storage with this one: what
  // an engine serves while the trainer keeps updating the original.
  absl::StatusOr<std::unique_ptr<Transformer>> MergedCopy(const ModelOptions& options) const;
  bool has_adapters() const { return lora_rank_ > 0; }
  int64_t lora_rank() const { return lora_rank_; }  // 0 without adapters.

  // ids [B,T] int64 -> final-normed hidden states [B,T,H]. Causal.
  at::Tensor Hidden(const at::Tensor& ids) const;
  // Sequence packing: ids [1,T] holds sequences of `lengths` (sum = T) back
  // to back; positions restart at 0 in each and attention stays inside
  // each, so every sequence gets the hidden states it would get alone.
  at::Tensor Hidden(const at::Tensor& ids, const std::vector<int64_t>& lengths) const;
  // ids [B,T] -> logits [B,T,V] fp32. For tests and short inputs: it
  // materializes the whole vocabulary.
  at::Tensor Logits(const at::Tensor& ids) const;
  // hidden [..., H] -> logits [..., V] fp32 (language-model head).
  at::Tensor HeadLogits(const at::Tensor& hidden) const;
  // log softmax(head(hidden)/temperature)[target] per position: hidden
  // [N,H] (or [B,T,H]), targets [N] (or [B,T]) int64, -1 = ignore (0 out,
  // no gradient). Returns fp32 of targets' shape. Works in chunks of
  // positions and recomputes the chunk's logits in backward, so [N,V] logits
  // never exist at once: the memory of a long sequence stays O(chunk x V).
  at::Tensor TokenLogprobs(const at::Tensor& hidden, const at::Tensor& targets, double temperature = 1.0) const;
  // Entropy of softmax(head(hidden)/temperature) per position, fp32 of
  // hidden's leading shape; chunks of positions bound the [chunk, V] logits.
  // with_grad: differentiable in hidden and the head (an entropy bonus; the
  // backward recomputes each chunk's logits), else without gradient.
  at::Tensor TokenEntropy(const at::Tensor& hidden, double temperature = 1.0, bool with_grad = false) const;
  // Value head: hidden [..., H] -> values [...] fp32. Head::kValue only.
  at::Tensor Values(const at::Tensor& hidden) const;

  // Generation. Prefill runs prompts ids [B,P] (right-padded; padding is
  // never attended to by real tokens) and writes their keys/values into
  // cache rows `slots` [B] at positions [0,P). Returns hidden [B,P,H].
  at::Tensor Prefill(const at::Tensor& ids, const at::Tensor& slots, KVCache* cache) const;
  // One token per sequence: ids[b] is written at positions[b] of cache row
  // slots[b] and attends to positions [0, positions[b]]. Host vectors: the
  // caller knows them, and one copy moves them to the device.
  // Returns logits [B,V] fp32.
  at::Tensor Decode(const std::vector<int64_t>& ids, const std::vector<int64_t>& slots,
                    const std::vector<int64_t>& positions, KVCache* cache) const;

  // Paged generation: ids holds the new tokens of every sequence of
  // `batch`, back to back (sum of lengths). Writes their keys/values into
  // `cache` and returns the logits [S,V] fp32 of each sequence's last new
  // token. Each new token attends to its sequence's cached positions and
  // the new ones before it, so a sequence whose prefix is cached (shared
  // prefix blocks, an earlier chunk) computes only its new tokens. All
  // lengths 1 is a decode step (batched GEMMs over the gathered blocks);
  // otherwise a prefill (attention per sequence).
  at::Tensor PagedForward(const std::vector<int64_t>& ids, const PagedBatch& batch, PagedKVCache* cache) const;
  // PagedForward's decode step on device tensors only, fixed shapes and no
  // host synchronisation (what a CUDA graph captures): ids, positions,
  // write slots (block * block_size + offset) [S] int64, block table
  // [S, max_blocks] int64. Returns the final-normed hidden states [S,H].
  at::Tensor PagedDecodeHidden(const at::Tensor& ids, const at::Tensor& positions, const at::Tensor& write,
                               const at::Tensor& table, PagedKVCache* cache) const;

  // The trainable tensors: the weights, or the WeightProvider's parameters.
  std::vector<at::Tensor> parameters() const;
  // Hands the weights to `provider` (built from this model's weights): the
  // resident copies are dropped, and from now on the forward computes in
  // `dtype` on `device` with the weights the provider gathers.
  void SetWeightProvider(std::unique_ptr<WeightProvider> provider, at::Device device, at::ScalarType dtype);
  WeightProvider* weight_provider() const { return provider_.get(); }
  // Tensors under their Hugging Face names and layout (q/k/v and gate/up
  // split back out): what Save() writes. merged: the adapters folded in.
  std::vector<std::pair<std::string, at::Tensor>> HFTensors(bool merged = false) const;
  // The adapters under PEFT's names (base_model.model.<module>.lora_{A,B}.weight).
  std::vector<std::pair<std::string, at::Tensor>> AdapterTensors() const;
  double lora_scale() const { return lora_scale_; }
  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  Head head() const { return head_; }
  // A value model whose head came from its checkpoint (score.weight), not a fresh zero one.
  bool value_head_loaded() const { return value_head_loaded_; }
  // Whether the fused CUDA kernels run for activations like x.
  bool fused_on(const at::Tensor& x) const { return options_.fused_kernels && x.is_cuda(); }
  void set_activation_checkpointing(bool on) { options_.activation_checkpointing = on; }
  void set_fused_kernels(bool on) { options_.fused_kernels = on; }
  void set_offload_activations(bool on) { options_.offload_activations = on; }
  // What a checkpointed block's autograd node keeps between its forward and
  // backward: x (offloaded to host memory when the options say so), cos, sin.
  // Both checkpointing nodes (this file's and learner/dist/fsdp.h's) use them.
  void SaveBlockInput(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                      const at::Tensor& sin) const;
  // {x, cos, sin} as saved, x back on the model's device.
  std::vector<at::Tensor> SavedBlockInput(torch::autograd::AutogradContext* ctx) const;

  // One block on x [B,T,H] with the given weights. Without a cache: causal
  // self-attention. With a cache: prefill writes rows `slots`, decode
  // (T == 1) writes `positions` and attends to [0, max_len).
  // Public for the checkpointing autograd node; callers use the methods above.
  struct Layer;
  struct DecodeState {
    at::Tensor slots, positions;  // [B] int64 on the device.
    at::Tensor bias;              // [B*kv_heads, 1, max_len]: 0 or -inf.
    int64_t max_len = 0;
    bool slots_are_prefix = false;  // slots == 0..B-1: read the cache without a gather.
  };
  // A PagedForward's per-call state, shared by every layer.
  struct PagedState {
    PagedKVCache* cache = nullptr;
    at::Tensor write;   // [N] int64: block * block_size + offset of each new token.
    at::Tensor table;   // [S, max_blocks] int64 block ids (padding: block 0, masked).
    int64_t max_blocks = 0;
    bool decode = false;
    at::Tensor positions;        // Decode: [S] int64, each query's position.
    bool decode_kernel = false;  // Decode by PagedDecodeAttention (CUDA, 16-bit), not gather + bmm.
    at::Tensor bias;    // Gather decode: [kv_heads*S, 1, max_blocks*block_size], 0 or -inf (heads leading).
    std::vector<int64_t> starts, lengths;
    std::vector<at::Tensor> masks;  // Prefill with a cached prefix: [n, start+n] bool, else undefined.
  };
  // `lengths`: packed sequences in the row (attention within each); empty = one.
  at::Tensor BlockForward(const Layer& w, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          KVCache* cache = nullptr, int layer = 0, const at::Tensor& slots = {},
                          const DecodeState* decode = nullptr, const std::vector<int64_t>& lengths = {},
                          const PagedState* paged = nullptr) const;

  struct Layer {
    at::Tensor input_norm;          // [H]
    at::Tensor qkv_w, qkv_b;        // [Q+2KV, H], [Q+2KV] or undefined
    at::Tensor o_w, o_b;            // [H, Q], [H] or undefined
    at::Tensor post_norm;           // [H]
    at::Tensor gate_up_w, gate_up_b;  // [2I, H], [2I] or undefined
    at::Tensor down_w, down_b;      // [H, I], [H] or undefined
    // LoRA adapters (ModelOptions::lora_rank), undefined without them.
    at::Tensor qkv_lora_a, qkv_lora_b;          // [r, H], [Q+2KV, r]
    at::Tensor o_lora_a, o_lora_b;              // [r, Q], [H, r]
    at::Tensor gate_up_lora_a, gate_up_lora_b;  // [r, H], [2I, r]
    at::Tensor down_lora_a, down_lora_b;        // [r, I], [H, r]

    // Every field in declaration order: the base weights (kBaseFields), then
    // the adapters. The one list that flat layouts, checkpointing and
    // parameters() walk.
    static constexpr size_t kBaseFields = 10, kFields = 18;
    std::vector<at::Tensor*> Fields();
    std::vector<const at::Tensor*> Fields() const;
  };
  // The resident weights (before SetWeightProvider): root and blocks.
  const RootWeights& root_weights() const { return root_; }
  const std::vector<Layer>& layers() const { return layers_; }

 private:
  Transformer(ModelConfig config, Head head, ModelOptions options);
  absl::Status InitRandom(uint64_t seed);
  absl::Status LoadFrom(const std::string& dir);
  // Fresh adapters (options_.lora_rank) on every layer.
  void InitAdapters();
  // The adapters a directory's adapter files hold: kept when options_ asks
  // for adapters of their rank, else folded into the base weights.
  absl::Status LoadAdapters(const std::string& dir);
  // Writes a tensor list as safetensors with config.json (Save's body).
  absl::Status SaveTensors(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors) const;
  void FinishParameters();
  // cos, sin [B,1,T,D] in the model dtype for positions [B,T].
  std::pair<at::Tensor, at::Tensor> Rope(const at::Tensor& positions) const;
  at::Tensor Norm(const at::Tensor& x, const at::Tensor& w) const;
  // Attention of q [B,nh,T,D] over the paged cache after writing k, v
  // [B,kvh,T,D] into it; returns [B,T,Q].
  at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int layer,
                            const PagedState& st) const;
  // Block `layer` of the training/scoring forward, checkpointed if asked.
  at::Tensor Block(int layer, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                   const std::vector<int64_t>& lengths) const;

  ModelConfig config_;
  Head head_;
  ModelOptions options_;
  at::Tensor inv_freq_;  // [D/2] fp32, on device.
  double attention_scaling_ = 1.0;  // cos/sin scale (YaRN).
  int64_t lora_rank_ = 0;           // Adapters present: their rank.
  bool value_head_loaded_ = false;
  double lora_scale_ = 0;           // lora_alpha / lora_rank.
  // Mutable: with a WeightProvider, each training forward points it at the
  // weights the provider gathered for that pass.
  mutable RootWeights root_;
  std::vector<Layer> layers_;  // Empty tensors when a WeightProvider holds them.
  std::unique_ptr<WeightProvider> provider_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_MODEL_H_
