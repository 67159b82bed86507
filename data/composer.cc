#include "data/composer.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace kernelrl {
namespace {

constexpr int kChainAttempts = 40;

struct Link {
  const OpSpec* spec;
  OpParams params;
};

struct Chain {
  std::vector<Link> links;
  std::vector<Shape> inputs;  // At batch 1.
};

bool BatchScales(const std::string& rule, size_t input_index) {
  return input_index == 0 || rule != "matmul2";  // matmul2's y is [K, N].
}

// Applies every link to the inputs with dim 0 set to `batch`.
absl::StatusOr<std::vector<OpStep>> Run(const Chain& chain, int64_t batch) {
  std::vector<OpStep> steps;
  Shape cur = chain.inputs[0];
  cur[0] = batch;
  for (const Link& link : chain.links) {
    auto st = Apply(*link.spec, link.params, cur);
    if (!st.ok()) return st.status();
    cur = st->out;
    steps.push_back(*std::move(st));
  }
  return steps;
}

std::string DimsText(const Shape& s) {
  std::vector<std::string> parts = {"batch_size"};
  for (size_t i = 1; i < s.size(); ++i) parts.push_back(absl::StrCat(s[i]));
  return absl::StrJoin(parts, ", ");
}

// 4871 -> 4800, 137 -> 130, 9 -> 9: batch sizes a person would write.
int64_t RoundDown2Significant(int64_t b) {
  int64_t scale = 1;
  while (b / scale >= 100) scale *= 10;
  return std::max<int64_t>(1, b / scale * scale);
}

}  // namespace

std::string ShortName(const std::string& op_name) {
  std::string s = op_name;
  for (const char* prefix : {"torch.special.", "torch.", "F.", "nn."}) {
    if (s.rfind(prefix, 0) == 0) {
      s = s.substr(std::string(prefix).size());
      break;
    }
  }
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  return out;
}

Composer::Composer(OpCatalogue catalogue, SamplerConfig sampler, TargetDevice target, uint64_t seed,
                   std::string id_prefix)
    : catalogue_(std::move(catalogue)),
      sampler_(std::move(sampler)),
      target_(std::move(target)),
      seed_(seed),
      id_prefix_(std::move(id_prefix)) {
  for (int i = 0; i < catalogue_.ops_size(); ++i) {
    OpSpec* op = catalogue_.mutable_ops(i);
    if (op->weight() <= 0) op->set_weight(1.0);  // proto3: an unset weight reads 0 and means 1.
    by_name_[op->name()] = i;
  }
}

std::vector<std::string> Composer::OperatorNames() const {
  std::vector<std::string> names;
  for (const auto& op : catalogue_.ops()) names.push_back(op.name());
  return names;
}

double Composer::EstimateMs(double bytes, double flops) const {
  const double bw = std::max(1.0, target_.bandwidth_gbps()) * 1e9;
  const double fl = std::max(1.0, target_.gflops()) * 1e9;
  return 1e3 * std::max(bytes / bw, flops / fl) + target_.launch_us() * 1e-3;
}

int Composer::DrawOperatorCount(Rng* rng) const {
  if (catalogue_.transformers_size() > 0 && rng->Coin(sampler_.transformers_share())) return 0;
  std::vector<double> w(sampler_.op_count_weights().begin(), sampler_.op_count_weights().end());
  w.resize(5, 0.0);
  if (w[0] + w[1] + w[2] + w[3] + w[4] <= 0) w = {1, 1, 1, 1, 1};
  return static_cast<int>(rng->Weighted(w)) + 1;
}

absl::StatusOr<ComposedTask> Composer::Compose(int64_t index) const {
  Rng rng(seed_, static_cast<uint64_t>(index));
  const int count = DrawOperatorCount(&rng);
  if (count == 0) {
    const auto& m = catalogue_.transformers(rng.Below(catalogue_.transformers_size()));
    return ComposeTransformers(index, m, &rng, Sizing());
  }
  absl::Status last = absl::InternalError("no attempt");
  for (int attempt = 0; attempt < kChainAttempts; ++attempt) {
    auto names = DrawSequence(count, &rng);
    if (!names.ok()) {
      last = names.status();
      continue;
    }
    auto task = ComposeSequence(index, *names, &rng, Sizing());
    if (task.ok()) return task;
    last = task.status();
  }
  return absl::Status(last.code(), absl::StrCat("candidate ", index, ": ", last.message()));
}

// Draws operator names whose rules chain for one drawn input; the shapes are
// drawn again by ComposeSequence (a sequence valid for one draw usually is for
// another, and ComposeSequence retries otherwise).
absl::StatusOr<std::vector<std::string>> Composer::DrawSequence(int count, Rng* rng) const {
  if (catalogue_.ops_size() == 0) return absl::FailedPreconditionError("empty operator catalogue");
  std::vector<double> w;
  for (const auto& op : catalogue_.ops()) w.push_back(op.last_only() && count > 1 ? 0.0 : op.weight());
  const OpSpec& first = catalogue_.ops(rng->Weighted(w));
  std::vector<Shape> inputs = DrawInputShapes(first, rng);
  if (inputs.empty()) return absl::InternalError(absl::StrCat("no input shape for ", first.name()));
  OpParams params = DrawParams(first, inputs[0], rng);
  if (first.rule() == "matmul2" || first.rule() == "bmm2") {
    params.kernel = inputs[1][inputs[1].size() - 2];
    params.out = inputs[1].back();
  }
  auto step = Apply(first, params, inputs[0]);
  if (!step.ok()) return step.status();
  std::vector<std::string> names = {first.name()};
  Shape cur = step->out;
  for (int i = 1; i < count; ++i) {
    std::vector<double> weights;
    for (const auto& op : catalogue_.ops()) {
      const bool ok = !op.first_only() && (!op.last_only() || i == count - 1) && op.name() != names.back() &&
                      Accepts(op, cur);
      weights.push_back(ok ? op.weight() : 0.0);
    }
    double total = 0;
    for (double x : weights) total += x;
    if (total <= 0) return absl::NotFoundError(absl::StrCat("no operator accepts ", ShapeText(cur)));
    const OpSpec& next = catalogue_.ops(rng->Weighted(weights));
    auto st = Apply(next, DrawParams(next, cur, rng), cur);
    if (!st.ok()) return st.status();
    cur = st->out;
    names.push_back(next.name());
  }
  return names;
}

absl::StatusOr<ComposedTask> Composer::ComposeSequence(int64_t index, const std::vector<std::string>& names, Rng* rng,
                                                       const Sizing& sizing) const {
  if (names.empty() || names.size() > 5) return absl::InvalidArgumentError("1 to 5 operators");
  std::vector<const OpSpec*> specs;
  for (size_t i = 0; i < names.size(); ++i) {
    const auto it = by_name_.find(names[i]);
    if (it == by_name_.end()) return absl::NotFoundError(absl::StrCat("operator '", names[i], "' not in catalogue"));
    const OpSpec* spec = &catalogue_.ops(it->second);
    if (spec->first_only() && i > 0) return absl::InvalidArgumentError(absl::StrCat(names[i], " must come first"));
    if (spec->last_only() && i + 1 < names.size())
      return absl::InvalidArgumentError(absl::StrCat(names[i], " must come last"));
    specs.push_back(spec);
  }
  absl::Status last = absl::InternalError("no attempt");
  for (int attempt = 0; attempt < kChainAttempts; ++attempt) {
    Chain chain;
    chain.inputs = DrawInputShapes(*specs[0], rng);
    if (chain.inputs.empty()) {
      last = absl::InternalError(absl::StrCat("no input shape for ", names[0]));
      continue;
    }
    Shape cur = chain.inputs[0];
    bool ok = true;
    for (size_t i = 0; i < specs.size(); ++i) {
      const OpSpec* spec = specs[i];
      if (i > 0 && !Accepts(*spec, cur)) {
        last = absl::InvalidArgumentError(absl::StrCat(spec->name(), " does not accept ", ShapeText(cur)));
        ok = false;
        break;
      }
      Link link{spec, DrawParams(*spec, cur, rng)};
      if (spec->rule() == "matmul2" || spec->rule() == "bmm2") {
        link.params.kernel = chain.inputs[1][chain.inputs[1].size() - 2];
        link.params.out = chain.inputs[1].back();
      }
      auto st = Apply(*spec, link.params, cur);
      if (!st.ok()) {
        last = st.status();
        ok = false;
        break;
      }
      cur = st->out;
      chain.links.push_back(link);
    }
    if (!ok) continue;

    // Sizing: cost is affine in the batch (shapes.h); pick the batch for a drawn target time.
    auto unit = Run(chain, 1);
    if (!unit.ok()) {
      last = unit.status();
      continue;
    }
    double fixed_bytes = 0, unit_bytes = 0, unit_flops = 0, max_act = 0;
    double unit_inputs = 0, fixed_inputs = 0;  // Memory of get_inputs() (per batch unit / fixed).
    for (size_t i = 0; i < chain.inputs.size(); ++i) {
      const double b = 4.0 * NumElements(chain.inputs[i]);
      if (BatchScales(specs[0]->rule(), i)) {
        max_act = std::max(max_act, b);
        unit_inputs += b;
      } else {
        fixed_inputs += b;
      }
    }
    for (const OpStep& st : *unit) {
      fixed_bytes += st.param_bytes;
      unit_bytes += st.bytes - st.param_bytes;
      unit_flops += st.flops;
      max_act = std::max(max_act, 4.0 * NumElements(st.out));
    }
    if (sizing.max_flops > 0 && (unit_flops > sizing.max_flops || unit_bytes + fixed_bytes > sizing.max_bytes)) {
      last = absl::ResourceExhaustedError("above the probe size limit");
      continue;
    }
    auto estimate = [&](int64_t b) {
      double ms = 0;
      for (const OpStep& st : *unit)
        ms += EstimateMs(st.param_bytes + (st.bytes - st.param_bytes) * b, st.flops * b);
      return ms;
    };
    // The probe's footprint (worker.py): parameters and inputs, the reference
    // output, a second output and the forward pass's working set beside them.
    const double fixed_peak = fixed_bytes + fixed_inputs, unit_peak = unit_inputs + 3 * max_act;
    int64_t batch = 1;
    if (sizing.size_batch) {
      const double lo = std::max(1e-3, sampler_.min_target_ms()), hi = std::max(lo, sampler_.max_target_ms());
      const double target = lo * std::pow(hi / lo, rng->Uniform());
      const double cap = sampler_.max_tensor_bytes() > 0 ? static_cast<double>(sampler_.max_tensor_bytes()) : 1e18;
      double max_b = std::min(1e7, std::floor(cap / std::max(1.0, max_act)));
      if (sampler_.max_task_bytes() > 0)
        max_b = std::min(max_b, std::floor((sampler_.max_task_bytes() - fixed_peak) / std::max(1.0, unit_peak)));
      const int64_t max_batch = static_cast<int64_t>(std::max(0.0, max_b));
      if (max_batch < 1 || estimate(1) > hi) {
        last = absl::ResourceExhaustedError(absl::StrFormat("batch 1 already estimated at %.2f ms", estimate(1)));
        continue;
      }
      int64_t a = 1, b = max_batch;  // Largest batch with estimate <= target.
      while (a < b) {
        const int64_t mid = a + (b - a + 1) / 2;
        if (estimate(mid) <= target) a = mid; else b = mid - 1;
      }
      batch = RoundDown2Significant(a);
      if (estimate(batch) < lo / 2) {
        last = absl::ResourceExhaustedError("memory cap leaves the task too small for the target time");
        continue;
      }
    }
    auto steps = Run(chain, batch);
    if (!steps.ok()) {
      last = steps.status();
      continue;
    }

    ComposedTask task;
    task.index = index;
    task.estimated_ms = estimate(batch);
    task.estimated_peak_bytes = static_cast<int64_t>(fixed_peak + unit_peak * batch);
    task.input_shape = chain.inputs[0];
    task.input_shape[0] = batch;
    task.output_shape = steps->back().out;
    std::vector<std::string> short_names;
    for (const OpSpec* spec : specs) {
      task.operators.push_back(spec->name());
      short_names.push_back(ShortName(spec->name()));
    }
    task.id = absl::StrFormat("%s%06d_%s", id_prefix_, index, absl::StrJoin(short_names, "_"));

    std::string init, forward;
    Shape shape = task.input_shape;
    const bool two = chain.inputs.size() == 2;
    forward += absl::StrCat("        # x: [", DimsText(shape), "]\n");
    for (size_t i = 0; i < specs.size(); ++i) {
      const OpStep& st = (*steps)[i];
      const std::string attr = absl::StrCat("self.", ShortName(specs[i]->name()), "_", i);
      if (!st.init.empty()) init += absl::StrCat("        ", attr, " = ", st.init, "\n");
      const std::string call = absl::StrReplaceAll(st.call, {{"{m}", attr}});
      forward += absl::StrCat("        x = ", call, "  # [", DimsText(st.out), "]\n");
    }
    std::string inputs_code;
    for (size_t i = 0; i < chain.inputs.size(); ++i) {
      Shape s = chain.inputs[i];
      std::string dims;
      if (BatchScales(specs[0]->rule(), i)) {
        dims = DimsText(s);
      } else {
        dims = absl::StrJoin(s, ", ");
      }
      inputs_code += absl::StrCat("    ", i == 0 ? "x" : "y", " = torch.rand(", dims, ")\n");
    }
    std::vector<std::string> pretty = task.operators;
    task.source = absl::StrCat(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
        "class Model(nn.Module):\n"
        "    \"\"\"", absl::StrJoin(pretty, " -> "), " (kernelrl data_synth, ", specs.size(),
        specs.size() == 1 ? " operator" : " operators", ").\"\"\"\n\n"
        "    def __init__(self):\n        super().__init__()\n", init,
        "\n    def forward(self, x", two ? ", y" : "", "):\n", forward, "        return x\n\n\n"
        "batch_size = ", batch, "\n\n\ndef get_inputs():\n", inputs_code, "    return [x", two ? ", y" : "", "]\n\n\n"
        "def get_init_inputs():\n    return []\n");
    return task;
  }
  return last;
}

absl::StatusOr<ComposedTask> Composer::ComposeTransformers(int64_t index, const TransformersModule& m, Rng* rng,
                                                           const Sizing& sizing) const {
  const bool tiny = !sizing.size_batch;
  const int64_t hidden = tiny ? 64 : rng->Pick(std::vector<int64_t>{512, 1024, 2048});
  const int64_t inter = tiny ? 128 : hidden * rng->Pick(std::vector<int64_t>{2, 3, 4});
  const int64_t head_dim = tiny ? 16 : 64;
  const int64_t heads = hidden / head_dim;
  const int64_t seq = tiny ? 8 : rng->Pick(std::vector<int64_t>{128, 256, 512});
  // Rough cost per sequence: an MLP-sized block (3 H x I weights) or a norm.
  const bool norm = m.construct() == "hidden_size";
  const double params = norm ? hidden : 3.0 * hidden * inter;
  const double unit_flops = norm ? 0 : 2.0 * seq * params;
  const double unit_bytes = 4.0 * seq * hidden * (norm ? 2 : 8);
  int64_t batch = 1;
  if (sizing.size_batch) {
    const double lo = std::max(1e-3, sampler_.min_target_ms()), hi = std::max(lo, sampler_.max_target_ms());
    const double target = lo * std::pow(hi / lo, rng->Uniform());
    const double cap = sampler_.max_tensor_bytes() > 0 ? static_cast<double>(sampler_.max_tensor_bytes()) : 1e18;
    const double act = 4.0 * seq * std::max(hidden, inter);
    double max_b = std::min(1e6, std::floor(cap / act));
    if (sampler_.max_task_bytes() > 0)
      max_b = std::min(max_b, std::floor((sampler_.max_task_bytes() - 4.0 * params) / (4.0 * seq * hidden + 3 * act)));
    const int64_t max_batch = static_cast<int64_t>(std::max(0.0, max_b));
    if (max_batch < 1) return absl::ResourceExhaustedError("transformers module above the memory cap");
    const double per = EstimateMs(unit_bytes, unit_flops), fixed = EstimateMs(4.0 * params, 0);
    batch = std::clamp<int64_t>(static_cast<int64_t>((target - fixed) / std::max(1e-9, per)), 1, max_batch);
    batch = RoundDown2Significant(batch);
  }
  ComposedTask task;
  task.index = index;
  task.transformers = true;
  task.operators = {absl::StrCat("transformers:", m.class_name())};
  task.id = absl::StrFormat("%s%06d_tf_%s", id_prefix_, index, ShortName(m.class_name()));
  task.input_shape = {batch, seq, hidden};
  task.output_shape = task.input_shape;
  task.estimated_ms = EstimateMs(4.0 * params + unit_bytes * batch, unit_flops * batch);
  task.estimated_peak_bytes =
      static_cast<int64_t>(4.0 * params + batch * (4.0 * seq * hidden + 3 * 4.0 * seq * std::max(hidden, inter)));
  std::string imports = absl::StrCat("from ", m.module_path(), " import ", m.class_name(), "\n");
  std::string build;
  if (m.construct() == "hidden_size") {
    build = absl::StrCat("        self.block = ", m.class_name(), "(", hidden, ")\n");
  } else {
    const size_t dot = m.config_class().rfind('.');
    if (dot == std::string::npos) return absl::InvalidArgumentError("config_class must be a dotted path");
    imports = absl::StrCat("from ", m.config_class().substr(0, dot), " import ", m.config_class().substr(dot + 1),
                           "\n", imports);
    build = absl::StrCat("        config = ", m.config_class().substr(dot + 1), "(hidden_size=", hidden,
                         ", intermediate_size=", inter, ", num_attention_heads=", heads,
                         ", num_key_value_heads=", heads, ", head_dim=", head_dim, ")\n");
    build += m.construct() == "intermediate_size_config"
                 ? absl::StrCat("        self.block = ", m.class_name(), "(", inter, ", config)\n")
                 : absl::StrCat("        self.block = ", m.class_name(), "(config)\n");
  }
  task.source = absl::StrCat(
      "import torch\nimport torch.nn as nn\n", imports, "\n\nclass Model(nn.Module):\n"
      "    \"\"\"transformers ", m.class_name(), ", standalone (kernelrl data_synth).\"\"\"\n\n"
      "    def __init__(self):\n        super().__init__()\n", build,
      "\n    def forward(self, x):\n        # x: [batch_size, ", seq, ", ", hidden, "]\n"
      "        out = self.block(x)\n        return out[0] if isinstance(out, (tuple, list)) else out\n\n\n"
      "batch_size = ", batch, "\n\n\ndef get_inputs():\n    return [torch.rand(batch_size, ", seq, ", ", hidden,
      ")]\n\n\ndef get_init_inputs():\n    return []\n");
  return task;
}

}  // namespace kernelrl
