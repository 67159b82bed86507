#include "data/catalogue.h"

#include <map>
#include <mutex>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "data/composer.h"
#include "google/protobuf/text_format.h"

namespace kernelrl {
namespace {

using ::kernelrl::v1::InventorySymbol;
using ::kernelrl::v1::TransformersCandidate;

// Keywords ("name=") of an argument template.
std::vector<std::string> Keywords(const std::string& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != '=' || (i + 1 < args.size() && args[i + 1] == '=')) continue;
    size_t j = i;
    while (j > 0 && (std::isalnum(static_cast<unsigned char>(args[j - 1])) || args[j - 1] == '_')) --j;
    if (j < i) out.push_back(args.substr(j, i - j));
  }
  return out;
}

Sizing ProbeSizing() {
  Sizing s;
  s.size_batch = false;
  s.max_flops = 2e8;
  s.max_bytes = 64e6;
  return s;
}

// The constructor pattern of a transformers module, or "" if none applies.
std::string ConstructOf(const TransformersCandidate& c) {
  std::vector<std::string> required;
  for (const auto& p : c.init_params())
    if (!p.has_default()) required.push_back(p.name());
  if (required == std::vector<std::string>{"config"}) return "config";
  if (required == std::vector<std::string>{"intermediate_size", "config"}) return "intermediate_size_config";
  static const std::set<std::string> width = {"hidden_size", "dim", "d_model", "normalized_shape", "embed_dim"};
  if (required.size() == 1 && width.count(required[0])) return "hidden_size";
  return "";
}

}  // namespace

absl::StatusOr<OpRules> LoadOpRules(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  OpRules rules;
  if (!google::protobuf::TextFormat::ParseFromString(*text, &rules))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an OpRules textproto"));
  std::set<std::string> names;
  for (const auto& op : rules.op()) {
    if (!IsKnownRule(op.rule()))
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", op.name(), " has unknown rule '", op.rule(), "'"));
    if (!names.insert(op.name()).second)
      return absl::InvalidArgumentError(absl::StrCat(path, ": duplicate operator ", op.name()));
  }
  return rules;
}

absl::StatusOr<OpCatalogue> Crawl(const OpRules& rules, const Inventory& inv, WorkerPool& pool,
                                  const CrawlProbe& probe, uint64_t seed) {
  OpCatalogue cat;
  cat.set_torch_version(inv.torch_version());
  cat.set_transformers_version(inv.transformers_version());
  cat.set_nn_modules_in_torch(inv.nn_modules_size());
  cat.set_functional_in_torch(inv.functional_count());
  std::map<std::string, const InventorySymbol*> symbols;
  for (const auto& s : inv.symbols()) symbols[s.name()] = &s;

  // Static checks first; only rules that pass them are probed.
  std::vector<const OpSpec*> to_probe;
  std::set<std::string> covered;
  for (const auto& op : rules.op()) {
    covered.insert(op.symbol());
    const auto it = symbols.find(op.symbol());
    if (it == symbols.end()) {
      (*cat.mutable_excluded())[op.name()] = absl::StrCat(op.symbol(), " is not in torch ", inv.torch_version());
      continue;
    }
    std::string bad;
    if (it->second->signature_known()) {
      std::set<std::string> params;
      for (const auto& p : it->second->params()) params.insert(p.name());
      for (const auto& k : Keywords(op.args()))
        if (!params.count(k)) bad = k;
    }
    if (!bad.empty()) {
      (*cat.mutable_excluded())[op.name()] = absl::StrCat("'", bad, "' is not a parameter of ", op.symbol());
      continue;
    }
    to_probe.push_back(&op);
  }
  for (const auto& m : inv.nn_modules())
    if (!covered.count("nn." + m)) cat.add_uncovered_nn_modules(m);

  // Probes: every rule twice (two draws), every transformers candidate once.
  OpCatalogue all_rules;
  for (const OpSpec* op : to_probe) *all_rules.add_ops() = *op;
  TargetDevice cpu;
  cpu.set_bandwidth_gbps(10);
  cpu.set_gflops(50);
  const Composer composer(all_rules, SamplerConfig(), cpu, seed, "crawl_");
  std::vector<TransformersModule> tf_modules;
  for (const auto& c : inv.transformers()) {
    const std::string construct = ConstructOf(c);
    std::vector<std::string> required_fwd;
    for (const auto& p : c.forward_params())
      if (!p.has_default()) required_fwd.push_back(p.name());
    std::string why;
    if (construct.empty()) why = "constructor pattern not supported";
    else if (required_fwd.size() != 1) why = absl::StrCat("forward needs ", required_fwd.size(), " inputs");
    else if (construct != "hidden_size" && c.config_class().empty()) why = "no config class";
    if (!why.empty()) {
      (*cat.mutable_excluded())[absl::StrCat("transformers:", c.class_name())] = why;
      continue;
    }
    TransformersModule m;
    m.set_family(c.family());
    m.set_module_path(c.module_path());
    m.set_class_name(c.class_name());
    m.set_config_class(c.config_class());
    m.set_construct(construct);
    tf_modules.push_back(m);
  }
  const int64_t op_jobs = 2 * static_cast<int64_t>(to_probe.size());
  std::vector<std::string> failure(op_jobs + tf_modules.size());
  pool.ForEach(op_jobs + static_cast<int64_t>(tf_modules.size()), [&](PythonWorker& w, int64_t j) {
    Rng rng(seed, 0xC0FFEE + static_cast<uint64_t>(j));
    absl::StatusOr<ComposedTask> task;
    std::string name;
    if (j < op_jobs) {
      const OpSpec& op = *to_probe[j / 2];
      // The job index in the name: rules may share a short name (ReLU, F.relu, torch.relu -> "relu") and
      // their probes run at the same time on different workers.
      name = absl::StrCat(ShortName(op.name()), "_", j);
      task = composer.ComposeSequence(j, {op.name()}, &rng, ProbeSizing());
    } else {
      const TransformersModule& m = tf_modules[j - op_jobs];
      name = absl::StrCat("tf_", ShortName(m.class_name()));
      task = composer.ComposeTransformers(j, m, &rng, ProbeSizing());
    }
    if (!task.ok()) {
      failure[j] = absl::StrCat("compose: ", task.status().message());
      return;
    }
    auto facts = probe(w, name, task->source);
    if (!facts.ok()) {
      failure[j] = absl::StrCat("probe: ", facts.status().message());
    } else if (!facts->error_stage().empty()) {
      failure[j] = absl::StrCat(facts->error_stage(), ": ", facts->error().substr(0, 300));
    } else if (std::vector<int64_t>(facts->output_shape().begin(), facts->output_shape().end()) != task->output_shape) {
      failure[j] = absl::StrCat("shape rule predicted ", ShapeText(task->output_shape), ", torch gave ",
                                ShapeText(Shape(facts->output_shape().begin(), facts->output_shape().end())));
    }
  });
  for (size_t i = 0; i < to_probe.size(); ++i) {
    const std::string& f = !failure[2 * i].empty() ? failure[2 * i] : failure[2 * i + 1];
    if (f.empty()) {
      *cat.add_ops() = *to_probe[i];
    } else {
      (*cat.mutable_excluded())[to_probe[i]->name()] = f;
    }
  }
  for (size_t i = 0; i < tf_modules.size(); ++i) {
    const std::string& f = failure[op_jobs + i];
    if (f.empty()) {
      *cat.add_transformers() = tf_modules[i];
    } else {
      (*cat.mutable_excluded())[absl::StrCat("transformers:", tf_modules[i].class_name())] = f;
    }
  }
  if (cat.ops_size() == 0) return absl::FailedPreconditionError("the crawl kept no operator rule");
  return cat;
}

}  // namespace kernelrl
