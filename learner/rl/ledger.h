// A job's ledger: an append-only file of LedgerRecord (proto/learner.proto),
// one JSON object per line, every lease and trajectory event in order.
//
// Contract: Append() returns only after the line is on disk (fdatasync), so
// whatever was acknowledged to an actor survives a crash. Open() replays the
// file; a torn last line (crash mid-write) is cut off and reported in
// torn_bytes, never half-applied. Thread-safe.
#ifndef KERNELRL_LEARNER_RL_LEDGER_H_
#define KERNELRL_LEARNER_RL_LEDGER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/learner.pb.h"

namespace kernelrl::learner::rl {

class Ledger {
 public:
  // Creates the file if missing; `replayed` receives the records already in it.
  static absl::StatusOr<std::unique_ptr<Ledger>> Open(const std::string& path,
                                                      std::vector<v1::LedgerRecord>* replayed);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Stamps unix_ms when unset; one write and one fdatasync for all records.
  absl::Status Append(std::vector<v1::LedgerRecord> records) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t torn_bytes() const { return torn_bytes_; }
  const std::string& path() const { return path_; }

  // Reads a ledger file without opening it for writing (tools, tests).
  static absl::StatusOr<std::vector<v1::LedgerRecord>> Read(const std::string& path);

 private:
  Ledger(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
  int64_t torn_bytes_ = 0;
};

int64_t UnixMs();

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_LEDGER_H_
