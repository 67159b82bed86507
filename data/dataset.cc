#include "data/dataset.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelrl {

v1::Task TaskFromDatasetRecord(const v1::DatasetRecord& record) {
  v1::Task task = record.task();
  auto& meta = *task.mutable_metadata();
  auto put = [&meta](const std::string& key, const std::string& value) {
    if (!value.empty()) meta.insert({"dataset." + key, value});  // insert keeps an existing key.
  };
  auto put_positive = [&put](const std::string& key, double value) {
    if (value > 0) put(key, absl::StrCat(value));
  };
  put("operators", absl::StrJoin(record.operators(), ","));
  put("num_operators", absl::StrCat(record.num_operators()));
  put("transformers", record.transformers() ? "true" : "false");
  put_positive("eager_us", record.eager_us());
  put_positive("eager_rse", record.eager_rse());
  put_positive("compiled_us", record.compiled_us());
  put("gpu_model", record.gpu_model());
  put("torch_version", record.torch_version());
  put("max_similarity", absl::StrCat(record.max_similarity()));
  put("most_similar", record.most_similar());
  return task;
}

}  // namespace kernelrl
