// The real path from data_synth to a learner job: the pipeline builds a small
// dataset on the CPU (small rule set, Python worker, filters, eager timing)
// and the learner's task-set loader (learner/rl/job_config.h) reads the
// dataset.jsonl it wrote, yielding runnable Tasks with their baselines.
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "data/data.pb.h"
#include "data/pipeline.h"
#include "data/report.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "learner/rl/job_config.h"

namespace kernelrl {
namespace {

namespace fs = std::filesystem;

// One small run per test binary (the worker's torch import dominates).
class DatasetTaskSetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    out_ = new std::string((fs::path(::testing::TempDir()) / "synth").string());
    fs::remove_all(*out_);
    const std::string text = absl::StrCat(R"pb(
      python: "python3"
      ops_file: "data/testdata/ops_small.textproto"
      target_accepted: 3
      max_candidates: 60
      workers: 1
      worker_threads: 1
      progress_every_s: 5
      request_timeout_s: 120
      id_prefix: "synth_"
      sampler { min_target_ms: 2 max_target_ms: 10 max_tensor_bytes: 67108864 }
      target { device: "cpu" }
      filters { compile_backend: "aot_eager" oom_retries: 1 }
      decontamination { max_similarity: 0.9 dedup: true histogram_bins: 10 }
    )pb", "seed: ", std::random_device{}() % 100000, " out_dir: \"", *out_, "\" harness_root: \"",
                                          fs::current_path().string(), "\"");
    DataConfig c;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &c));
    auto full = WithDataDefaults(c);
    ASSERT_TRUE(full.ok()) << full.status();
    Pipeline pipeline(*full);
    const auto st = pipeline.Run();
    ASSERT_TRUE(st.ok()) << st;
  }
  static void TearDownTestSuite() { delete out_; }
  static std::string Dataset() { return *out_ + "/dataset.jsonl"; }
  static std::string* out_;
};
std::string* DatasetTaskSetTest::out_ = nullptr;

std::vector<v1::DatasetRecord> Records(const std::string& path) {
  std::vector<v1::DatasetRecord> out;
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    v1::DatasetRecord r;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &r).ok()) << line;
    out.push_back(r);
  }
  return out;
}

TEST_F(DatasetTaskSetTest, TheLearnersLoaderReadsTheSynthesizedDataset) {
  const auto records = Records(Dataset());
  ASSERT_GE(records.size(), 3u) << "the run accepted fewer tasks than its target";
  auto tasks = learner::rl::LoadTaskSet(Dataset());
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), records.size());
  std::set<std::string> ids;
  for (size_t i = 0; i < tasks->size(); ++i) {
    const v1::Task& t = (*tasks)[i];
    const v1::DatasetRecord& r = records[i];
    EXPECT_EQ(t.id(), r.task().id());
    EXPECT_TRUE(ids.insert(t.id()).second) << "duplicate id " << t.id();
    EXPECT_EQ(t.id().rfind("synth_", 0), 0u) << t.id();
    EXPECT_NE(t.reference_source().find("class Model(nn.Module)"), std::string::npos) << t.id();
    EXPECT_NE(t.reference_source().find("def get_inputs"), std::string::npos) << t.id();
    EXPECT_NE(t.reference_source().find("def get_init_inputs"), std::string::npos) << t.id();
    EXPECT_EQ(t.reference_source(), r.task().reference_source());
    EXPECT_EQ(t.inputs().device(), "cpu");
    EXPECT_EQ(t.content_hash().size(), 64u);
    // The record's facts ride along in metadata; the task's own provenance stays.
    const auto& m = t.metadata();
    ASSERT_TRUE(m.count("dataset.eager_us")) << t.id();
    EXPECT_GT(std::stod(m.at("dataset.eager_us")), 0) << t.id();
    EXPECT_EQ(m.at("dataset.num_operators"), absl::StrCat(r.num_operators()));
    EXPECT_EQ(m.at("dataset.operators"), m.at("operators"));
    EXPECT_EQ(m.at("source"), "kernelrl data_synth");
    EXPECT_FALSE(m.count("dataset.compiled_us")) << "a lazy baseline must not read as 0 us";
  }
  // data/'s own reader agrees with the learner's.
  auto same = LoadTaskSet(Dataset());
  ASSERT_TRUE(same.ok()) << same.status();
  ASSERT_EQ(same->size(), tasks->size());
  for (size_t i = 0; i < tasks->size(); ++i) EXPECT_EQ((*same)[i].DebugString(), (*tasks)[i].DebugString());
}

TEST_F(DatasetTaskSetTest, ValidateJobSpecAcceptsTheDatasetAsTaskSet) {
  const fs::path ckpt = fs::path(::testing::TempDir()) / "ckpt";
  fs::create_directories(ckpt);
  std::ofstream(ckpt / "config.json") << "{}\n";
  v1::JobSpec spec;
  spec.set_base_checkpoint(ckpt.string());
  spec.set_task_set(Dataset());
  const auto st = learner::rl::ValidateJobSpec(spec);
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(DatasetTaskSetTest, PlainTaskAndRecordLinesMixAndBadLinesAreNamed) {
  const auto records = Records(Dataset());
  ASSERT_FALSE(records.empty());
  std::string plain, record;
  v1::Task t = records[0].task();
  t.set_id("plain_copy");
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(t, &plain).ok());
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(records[0], &record).ok());
  const std::string mixed = (fs::path(::testing::TempDir()) / "mixed.jsonl").string();
  std::ofstream(mixed) << "# a comment\n" << plain << "\n\n" << record << "\n";
  auto tasks = learner::rl::LoadTaskSet(mixed);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].id(), "plain_copy");
  EXPECT_FALSE((*tasks)[0].metadata().count("dataset.eager_us"));  // A plain Task is taken as it is.
  EXPECT_EQ((*tasks)[1].id(), records[0].task().id());

  const std::string bad = (fs::path(::testing::TempDir()) / "bad.jsonl").string();
  std::ofstream(bad) << record << "\n{\"task\": {\"id\": \"x\"}, \"operatorz\": []}\n";
  auto refused = learner::rl::LoadTaskSet(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("bad.jsonl:2"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("DatasetRecord"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace kernelrl
