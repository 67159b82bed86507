// The run's outputs, rebuilt from the journal (so a resumed run reports the
// whole run, not its last process):
//   dataset.jsonl      accepted candidates in index order, one DatasetRecord a
//                      line: the Task (KernelBench source, content hash,
//                      library policy, provenance), operators, counts, the eager
//                      baseline; what a learner job names as task_set;
//   report.md          Table-3 layout (share of 1..5-operator and transformers
//                      tasks, next to the paper's), acceptance per filter,
//                      throughput, the similarity histogram as text;
//   similarity.json/.png  max AST similarity to KernelBench, accepted tasks and
//                      all candidates that reached decontamination.
#ifndef KERNELRL_DATA_REPORT_H_
#define KERNELRL_DATA_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/data.pb.h"
#include "proto/task.pb.h"

namespace kernelrl {

using ::kernelrl::v1::CandidateRecord;
using ::kernelrl::v1::DataConfig;
using ::kernelrl::v1::OpCatalogue;
using ::kernelrl::v1::Task;

struct RunStats {
  double seconds = 0;       // Wall time of this process.
  long long decided = 0;    // Candidates decided by this process.
  long long accepted = 0;
  int workers = 0;          // Worker processes of this process (0: unknown).
};

absl::Status WriteOutputs(const DataConfig& config, const OpCatalogue& catalogue, const std::string& state_dir,
                          const RunStats& run);

// The report text from journal records (tests check it without files).
std::string ReportText(const DataConfig& config, const OpCatalogue& catalogue,
                       const std::vector<CandidateRecord>& records, const RunStats& run);

// Reads a dataset.jsonl into Tasks (TaskFromDatasetRecord, data/dataset.h);
// the learner's own loader (learner/rl/job_config.h) reads the same file.
absl::StatusOr<std::vector<Task>> LoadTaskSet(const std::string& path);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_REPORT_H_
