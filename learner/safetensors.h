// Reader and writer for the safetensors format, as Hugging Face writes it:
//   [8 bytes little-endian u64 N][N bytes JSON header][raw tensor bytes]
// The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the start of the data), plus an optional
// "__metadata__" map of string -> string.
//
// Contract: SafetensorsFile::Open memory-maps the file read-only and validates
// everything before returning: header length within the file, JSON well
// formed, known dtypes, non-negative shapes, byte ranges that match
// shape x dtype size, lie inside the file and neither overlap nor leave
// holes. Any violation is an InvalidArgument/DataLoss error naming the file
// and the tensor. Views stay valid while the SafetensorsFile lives.
//
// Checkpoints may be one file (model.safetensors) or shards listed in
// model.safetensors.index.json; SafetensorsDir hides the difference.
// This file is torch-free; the model converts views to tensors.
#ifndef KERNELRL_LEARNER_SAFETENSORS_H_
#define KERNELRL_LEARNER_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file.h"  // ReadFileToString, WriteFileAtomically: used with every checkpoint file.

namespace kernelrl::learner {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", ... as written in the header.
absl::StatusOr<DType> ParseDType(absl::string_view name);
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // Points into the mapping.
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(absl::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards
// named by model.safetensors.index.json (each tensor must be in the shard the
// index names; names unique across shards).
class SafetensorsDir {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsDir>> Open(const std::string& dir);
  const TensorView* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> by_name_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Writes one safetensors file at `path` (header padded to 8 bytes so data is
// aligned). Written through a temporary file, fsynced and renamed, so a
// reader never sees a partial file.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes model.safetensors, or, if the total exceeds max_shard_bytes,
// model-0000k-of-0000n.safetensors shards plus model.safetensors.index.json.
absl::Status WriteSafetensorsDir(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                 size_t max_shard_bytes);

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_SAFETENSORS_H_
