#include "data/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_util.h"
#include "google/protobuf/util/json_util.h"

namespace kernelrl {
namespace {

// Parses complete lines; returns the byte length of the good prefix.
size_t ParseLines(const std::string& text, std::vector<CandidateRecord>* out) {
  size_t pos = 0, good = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // Torn last line.
    CandidateRecord r;
    if (!google::protobuf::util::JsonStringToMessage(text.substr(pos, nl - pos), &r).ok()) break;
    out->push_back(std::move(r));
    pos = nl + 1;
    good = pos;
  }
  return good;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path,
                                                       std::vector<CandidateRecord>* existing) {
  auto text = ReadFileToString(path);
  size_t good = 0;
  if (text.ok()) {
    good = ParseLines(*text, existing);
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  if (ftruncate(fd, static_cast<off_t>(good)) != 0 || lseek(fd, 0, SEEK_END) < 0) {
    close(fd);
    return ErrnoToStatus(errno, absl::StrCat("truncate ", path));
  }
  return std::unique_ptr<Journal>(new Journal(path, fd));
}

Journal::~Journal() {
  absl::MutexLock l(&mu_);
  if (fd_ >= 0) close(fd_);
}

absl::Status Journal::Append(const CandidateRecord& record) {
  std::string line;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  const auto st = google::protobuf::util::MessageToJsonString(record, &line, opts);
  if (!st.ok()) return absl::InternalError(st.ToString());
  line += '\n';
  absl::MutexLock l(&mu_);
  return WriteAll(fd_, line, path_);
}

absl::StatusOr<std::vector<CandidateRecord>> ReadJournal(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<CandidateRecord> out;
  ParseLines(*text, &out);
  return out;
}

}  // namespace kernelrl
