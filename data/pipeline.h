// data_synth's core, one run from the installed torch to a task set:
//
//   1. crawl      the catalogue of operator rules that hold in this torch
//                 (data/catalogue.h), kept in state/ and reused on resume;
//   2. references fingerprints of every KernelBench program (AST, data/ast_similarity.h);
//   3. candidates on `workers` threads, each with its own Python worker:
//                 compose (data/composer.h) -> dedup -> decontaminate ->
//                 probe (eager, compiled, repeat, other inputs) -> filters
//                 (data/filters.h) -> eager timing through the profiler's
//                 precompute.measure_task, serialised on the device by the
//                 profiler's GPU lock -> runtime filter;
//   4. outputs    dataset.jsonl (DatasetRecord lines, the learner's task_set),
//                 report.md (Table-3 layout, per-filter acceptance, throughput),
//                 similarity.png (max similarity to KernelBench).
//
// Every candidate's fate is appended to state/journal.jsonl before the next
// one is claimed from that thread; a killed run (kill -9 included) restarts
// from the journal and composes the unfinished indices again (candidate i is
// a pure function of (seed, i)). Outputs are rebuilt from the journal, so
// they never depend on which process accepted what.
#ifndef KERNELRL_DATA_PIPELINE_H_
#define KERNELRL_DATA_PIPELINE_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "data/ast_similarity.h"
#include "data/composer.h"
#include "data/data.pb.h"
#include "data/journal.h"
#include "data/filters.h"
#include "data/llm_composer.h"
#include "data/memory_budget.h"
#include "data/python_worker.h"

namespace kernelrl {

using ::kernelrl::v1::DataConfig;

// Fills what proto3 cannot default and checks the rest.
absl::StatusOr<DataConfig> WithDataDefaults(DataConfig c);

class Pipeline {
 public:
  explicit Pipeline(DataConfig config);  // Defaults already applied.
  // composer "llm": the backend and its tokenizer (else Run builds them from
  // DataConfig.llm through agent::MakePolicyClient; tests hand in a fake).
  void SetPolicy(std::unique_ptr<agent::PolicyClient> policy, std::unique_ptr<agent::Tokenizer> tokenizer) {
    policy_ = std::move(policy);
    tokenizer_ = std::move(tokenizer);
  }
  absl::Status Run();
  // Stops claiming candidates; in-flight ones finish and outputs are written.
  void RequestStop() { stop_ = true; }

 private:
  absl::StatusOr<OpCatalogue> LoadOrCrawl(WorkerPool& pool);
  absl::Status LoadReferences(WorkerPool& pool);
  void Restore(const std::vector<CandidateRecord>& records);
  // Next candidate index to run, or -1 when the run is done.
  int64_t Claim() ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(const CandidateRecord& record) ABSL_LOCKS_EXCLUDED(mu_);
  CandidateRecord RunCandidate(PythonWorker& w, int64_t index);
  // Probe, compile check, timing and their rules within one memory grant
  // (0: no cap); the rejection, or nullopt for an accepted task.
  std::optional<Rejection> Execute(PythonWorker& w, const ComposedTask& task, const std::string& path,
                                   int64_t memory_limit_bytes, CandidateRecord* rec);
  // Dedup: true if the hash was free and is now held by this candidate.
  bool ClaimHash(const std::string& hash) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseHash(const std::string& hash) ABSL_LOCKS_EXCLUDED(mu_);
  void Progress(bool final) ABSL_LOCKS_EXCLUDED(mu_);

  DataConfig config_;
  std::string state_dir_;
  std::unique_ptr<Composer> composer_;
  std::unique_ptr<agent::PolicyClient> policy_;      // Until Run hands them to llm_composer_.
  std::unique_ptr<agent::Tokenizer> tokenizer_;
  std::unique_ptr<LlmComposer> llm_composer_;        // composer "llm" only.
  ReferenceSet references_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<MemoryBudget> budget_;            // One unit per worker (data/memory_budget.h).
  std::atomic<bool> stop_{false};
  double started_ = 0;

  absl::Mutex mu_;
  std::set<int64_t> done_ ABSL_GUARDED_BY(mu_);
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t run_done_ ABSL_GUARDED_BY(mu_) = 0;      // Finished by this process.
  int64_t run_accepted_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> rejected_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> hashes_ ABSL_GUARDED_BY(mu_);  // hash -> accepted (false: in flight)
};

}  // namespace kernelrl

#endif  // KERNELRL_DATA_PIPELINE_H_
