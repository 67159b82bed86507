// The append-only record of every candidate's fate (state/journal.jsonl): the
// resume point and the source of the dataset and the report.
//
// Invariant: a candidate index appears at most once, and only once its fate is
// final; each record is one write(2) of one line, so a run killed at any
// moment (kill -9 included) leaves at most a torn last line, which Open() cuts
// off. Candidates that were in flight are simply composed again: candidate i
// is a pure function of (seed, i).
// Thread-safety: Append may be called from many threads.
#ifndef KERNELRL_DATA_JOURNAL_H_
#define KERNELRL_DATA_JOURNAL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data/data.pb.h"

namespace kernelrl {

using ::kernelrl::v1::CandidateRecord;

class Journal {
 public:
  // Reads the records already there into *existing and opens for appending.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& path,
                                                       std::vector<CandidateRecord>* existing);
  ~Journal();
  absl::Status Append(const CandidateRecord& record) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Journal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;  // Names the file in errors.
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
};

// All records of a journal file (torn last line skipped), for the report.
absl::StatusOr<std::vector<CandidateRecord>> ReadJournal(const std::string& path);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_JOURNAL_H_
