#include "learner/rl/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/status_util.h"
#include "google/protobuf/util/json_util.h"

namespace kernelrl::learner::rl {
namespace {

struct Parsed {
  std::vector<v1::LedgerRecord> records;
  size_t good_bytes = 0;  // Up to the end of the last complete line.
};

absl::StatusOr<Parsed> Parse(const std::string& text, const std::string& path) {
  Parsed p;
  size_t pos = 0;
  int line = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // Torn tail: no newline yet.
    ++line;
    v1::LedgerRecord r;
    auto s = google::protobuf::util::JsonStringToMessage(text.substr(pos, nl - pos), &r);
    if (!s.ok()) {
      return absl::DataLossError(absl::StrCat(path, ":", line, ": not a ledger record: ", s.ToString()));
    }
    p.records.push_back(std::move(r));
    pos = nl + 1;
    p.good_bytes = pos;
  }
  return p;
}

}  // namespace

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::vector<v1::LedgerRecord>> Ledger::Read(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto p = Parse(*text, path);
  if (!p.ok()) return p.status();
  return std::move(p->records);
}

absl::StatusOr<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path, std::vector<v1::LedgerRecord>* replayed) {
  std::string text;
  if (auto t = ReadFileToString(path); t.ok()) {
    text = std::move(*t);
  } else if (!absl::IsNotFound(t.status())) {
    return t.status();
  }
  auto p = Parse(text, path);
  if (!p.ok()) return p.status();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  if (::ftruncate(fd, p->good_bytes) != 0 || ::lseek(fd, 0, SEEK_END) < 0 || ::fsync(fd) != 0) {
    ::close(fd);
    return ErrnoToStatus(errno, absl::StrCat("truncate ", path));
  }
  std::unique_ptr<Ledger> ledger(new Ledger(path, fd));
  ledger->torn_bytes_ = static_cast<int64_t>(text.size() - p->good_bytes);
  if (replayed != nullptr) *replayed = std::move(p->records);
  return ledger;
}

Ledger::~Ledger() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) ::close(fd_);
}

absl::Status Ledger::Append(std::vector<v1::LedgerRecord> records) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const int64_t now = UnixMs();
  for (v1::LedgerRecord& r : records) {
    if (r.unix_ms() == 0) r.set_unix_ms(now);
    std::string line;
    auto s = google::protobuf::util::MessageToJsonString(r, &line, options);
    if (!s.ok()) return absl::InternalError(s.ToString());
    absl::StrAppend(&out, line, "\n");
  }
  absl::MutexLock lock(&mu_);
  KR_RETURN_IF_ERROR(WriteAll(fd_, out, path_));
  if (::fdatasync(fd_) != 0) return ErrnoToStatus(errno, absl::StrCat("fdatasync ", path_));
  return absl::OkStatus();
}

}  // namespace kernelrl::learner::rl
