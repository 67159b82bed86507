#include "learner/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/json.h"
#include "common/status_util.h"

namespace kernelrl::learner {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // The reference implementation's cap.

}  // namespace

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F64", DType::kF64}, {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16}, {"I8", DType::kI8},
      {"U8", DType::kU8},   {"BOOL", DType::kBool}};
  for (const auto& [n, d] : kNames) {
    if (name == n) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported safetensors dtype \"", name, "\""));
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF64: return "F64";
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? absl::NotFoundError(absl::StrCat("safetensors file not found: ", path))
                           : ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  }
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    f->map_ = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map_ == MAP_FAILED) {
      f->map_ = nullptr;
      ::close(fd);
      return ErrnoToStatus(errno, absl::StrCat("mmap ", path));
    }
  }
  ::close(fd);
  if (auto s = f->Parse(); !s.ok()) return s;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

absl::Status SafetensorsFile::Parse() {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("corrupt safetensors file ", path_, ": ", what));
  };
  const uint8_t* base = static_cast<const uint8_t*>(map_);
  if (size_ < 8) return bad(absl::StrCat("file is ", size_, " bytes, shorter than the 8-byte header length"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > kMaxHeaderBytes) return bad(absl::StrCat("header length ", n, " exceeds the 100 MiB limit"));
  if (n > size_ - 8) {
    return bad(absl::StrCat("header length ", n, " runs past the end of the file (", size_, " bytes): truncated?"));
  }
  absl::string_view header(reinterpret_cast<const char*>(base + 8), n);
  if (header.empty() || header[0] != '{') return bad("header does not start with '{'");
  auto json = ParseJson(header);
  if (!json.ok()) return bad(json.status().message());
  if (!json->is_object()) return bad("header is not a JSON object");
  const uint8_t* data = base + 8 + n;
  const size_t data_size = size_ - 8 - n;

  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, entry] : json->items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return bad(absl::StrCat("__metadata__ value of \"", k, "\" is not a string"));
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto tbad = [&](absl::string_view what) { return bad(absl::StrCat("tensor \"", name, "\": ", what)); };
    if (!entry.is_object()) return tbad("entry is not an object");
    const Json* dt = FindJson(entry, "dtype");
    const Json* shape = FindJson(entry, "shape");
    const Json* offs = FindJson(entry, "data_offsets");
    if (dt == nullptr || !dt->is_string()) return tbad("missing string \"dtype\"");
    if (shape == nullptr || !shape->is_array()) return tbad("missing array \"shape\"");
    if (offs == nullptr || !offs->is_array() || offs->size() != 2) return tbad("\"data_offsets\" must be [begin, end]");
    TensorView v;
    v.name = name;
    auto dtype = ParseDType(dt->get<std::string>());
    if (!dtype.ok()) return tbad(dtype.status().message());
    v.dtype = *dtype;
    uint64_t numel = 1;
    for (const Json& d : *shape) {
      auto dim = JsonInt(d);
      if (!dim.ok() || *dim < 0) return tbad("shape entries must be non-negative integers");
      v.shape.push_back(*dim);
      if (*dim != 0 && numel > (uint64_t{1} << 62) / static_cast<uint64_t>(*dim)) return tbad("shape overflows");
      numel *= static_cast<uint64_t>(*dim);
    }
    auto b = JsonInt((*offs)[0]);
    auto e = JsonInt((*offs)[1]);
    if (!b.ok() || !e.ok() || *b < 0 || *e < *b) return tbad("data_offsets must be integers with 0 <= begin <= end");
    if (static_cast<uint64_t>(*e) > data_size) {
      return tbad(absl::StrCat("data ends at byte ", *e, " but the file holds only ", data_size,
                               " data bytes: truncated?"));
    }
    v.nbytes = static_cast<size_t>(*e - *b);
    if (v.nbytes != numel * DTypeSize(v.dtype)) {
      return tbad(absl::StrCat("holds ", v.nbytes, " bytes but shape x dtype needs ", numel * DTypeSize(v.dtype)));
    }
    v.data = data + *b;
    ranges.emplace_back(static_cast<size_t>(*b), static_cast<size_t>(*e));
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(v));
  }
  std::sort(ranges.begin(), ranges.end());
  size_t cursor = 0;
  for (const auto& [b, e] : ranges) {
    if (b < cursor) return bad(absl::StrCat("tensor byte ranges overlap at data offset ", b));
    if (b > cursor) return bad(absl::StrCat("hole in tensor data between offsets ", cursor, " and ", b));
    cursor = e;
  }
  if (cursor != data_size) {
    return bad(absl::StrCat("tensors cover ", cursor, " data bytes but the file has ", data_size));
  }
  return absl::OkStatus();
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<SafetensorsDir>> SafetensorsDir::Open(const std::string& dir) {
  auto out = std::make_unique<SafetensorsDir>();
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> expected_file;  // tensor -> shard
  if (::access(index_path.c_str(), F_OK) == 0) {
    auto text = ReadFileToString(index_path);
    if (!text.ok()) return text.status();
    auto idx = ParseJson(*text);
    if (!idx.ok()) return absl::DataLossError(absl::StrCat(index_path, ": ", idx.status().message()));
    const Json* wm = FindJson(*idx, "weight_map");
    if (wm == nullptr || !wm->is_object()) return absl::DataLossError(absl::StrCat(index_path, ": no \"weight_map\" object"));
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::DataLossError(absl::StrCat(index_path, ": bad shard name for ", tensor));
      }
      expected_file[tensor] = file.get<std::string>();
      if (std::find(files.begin(), files.end(), file.get<std::string>()) == files.end()) files.push_back(file.get<std::string>());
    }
  } else {
    files.push_back("model.safetensors");
  }
  for (const std::string& name : files) {
    auto f = SafetensorsFile::Open(dir + "/" + name);
    if (!f.ok()) return f.status();
    for (const TensorView& t : (*f)->tensors()) {
      if (!expected_file.empty()) {
        auto it = expected_file.find(t.name);
        if (it == expected_file.end() || it->second != name) {
          return absl::DataLossError(absl::StrCat("tensor ", t.name, " found in ", name, " but the index says ",
                                                  it == expected_file.end() ? "nothing" : it->second));
        }
      }
      if (!out->by_name_.emplace(t.name, &t).second) {
        return absl::DataLossError(absl::StrCat("tensor ", t.name, " appears in two shards"));
      }
    }
    out->files_.push_back(std::move(*f));
  }
  for (const auto& [tensor, file] : expected_file) {
    if (!out->by_name_.count(tensor)) {
      return absl::DataLossError(absl::StrCat("index lists ", tensor, " in ", file, " but the shard lacks it"));
    }
  }
  return out;
}

const TensorView* SafetensorsDir::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsDir::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, v] : by_name_) names.push_back(n);
  return names;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json md = Json::object();
    for (const auto& [k, v] : metadata) md[k] = Json(v);
    header["__metadata__"] = std::move(md);
  }
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    uint64_t numel = 1;
    Json shape = Json::array();
    for (int64_t d : t.shape) {
      shape.push_back(Json(d));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * DTypeSize(t.dtype) != t.nbytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": ", t.nbytes, " bytes given, shape needs ",
                                                     numel * DTypeSize(t.dtype)));
    }
    Json e = Json::object();
    e["dtype"] = Json(DTypeName(t.dtype));
    e["shape"] = std::move(shape);
    e["data_offsets"] = Json::array({Json(static_cast<int64_t>(offset)),
                                       Json(static_cast<int64_t>(offset + t.nbytes))});
    if (FindJson(header, t.name) != nullptr) return absl::InvalidArgumentError(absl::StrCat("duplicate tensor ", t.name));
    header[t.name] = std::move(e);
    offset += t.nbytes;
  }
  std::string h = DumpJson(header);
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));

  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("create ", tmp));
  absl::Status s = WriteAll(fd, absl::string_view(reinterpret_cast<const char*>(len), 8), tmp);
  if (s.ok()) s = WriteAll(fd, h, tmp);
  for (const TensorToWrite& t : tensors) {
    if (s.ok()) s = WriteAll(fd, absl::string_view(static_cast<const char*>(t.data), t.nbytes), tmp);
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoToStatus(errno, absl::StrCat("fsync ", tmp));
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoToStatus(errno, absl::StrCat("rename to ", path));
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

absl::Status WriteSafetensorsDir(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                 size_t max_shard_bytes) {
  size_t total = 0;
  for (const auto& t : tensors) total += t.nbytes;
  std::map<std::string, std::string> md = {{"format", "pt"}};
  if (total <= max_shard_bytes) return WriteSafetensors(dir + "/model.safetensors", tensors, md);
  std::vector<std::vector<TensorToWrite>> shards(1);
  size_t in_shard = 0;
  for (const auto& t : tensors) {
    if (in_shard > 0 && in_shard + t.nbytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += t.nbytes;
  }
  Json weight_map = Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    if (auto s = WriteSafetensors(dir + "/" + name, shards[i], md); !s.ok()) return s;
    for (const auto& t : shards[i]) weight_map[t.name] = Json(name);
  }
  Json index = Json::object();
  index["metadata"] = Json::object({{"total_size", Json(static_cast<int64_t>(total))}});
  index["weight_map"] = std::move(weight_map);
  return WriteFileAtomically(dir + "/model.safetensors.index.json", DumpJson(index, 2));
}

}  // namespace kernelrl::learner
