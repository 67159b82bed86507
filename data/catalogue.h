// The seed crawl: which operator rules (data/ops.textproto) hold in the
// installed torch, and which transformers modules can stand alone.
//
//   1. inventory (worker): every torch.nn module, torch.nn.functional and
//      torch callable with its signature; transformers candidates of the
//      configured families (nn.Module classes of modeling_<family>);
//   2. a rule is kept when its symbol exists, every keyword of its argument
//      template is a parameter of that symbol (where the signature is known),
//      and probes of two small instances on the CPU give the output shapes the
//      shape rule predicts;
//   3. a transformers module is kept when its constructor is one the composer
//      can call ((config), (hidden_size, ...), (intermediate_size, config)),
//      its forward takes one required tensor, and a small probe returns the
//      input's shape.
// Everything excluded is listed with the reason (OpCatalogue.excluded).
#ifndef KERNELRL_DATA_CATALOGUE_H_
#define KERNELRL_DATA_CATALOGUE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "data/data.pb.h"
#include "data/python_worker.h"

namespace kernelrl {

using ::kernelrl::v1::OpCatalogue;
using ::kernelrl::v1::OpRules;

// Writes `source` to a file named after `name` and probes it (eager only).
using CrawlProbe =
    std::function<absl::StatusOr<ProbeFacts>(PythonWorker& w, const std::string& name, const std::string& source)>;

absl::StatusOr<OpCatalogue> Crawl(const OpRules& rules, const Inventory& inventory, WorkerPool& pool,
                                  const CrawlProbe& probe, uint64_t seed);

absl::StatusOr<OpRules> LoadOpRules(const std::string& path);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_CATALOGUE_H_
