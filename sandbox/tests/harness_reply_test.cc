// The zygote's replies against the jobs that asked for them, as a table:
// every job kind against every reply case (only the case the kind names
// answers it; the zygote's own error and every other case are distinct
// Status codes that name both sides), and the JSON lines as the zygote writes
// them (one reply under its kind's key; unknown keys, two replies, or the old
// untagged form are rejected rather than read as empty fields).
#include "sandbox/harness_reply.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

using v1::sandbox::HarnessJob;
using v1::sandbox::HarnessResult;

const std::vector<std::string>& JobKinds() {
  static const std::vector<std::string> kKinds = {"verify", "health", "isolation_probe", "recorder_probe",
                                                  "copy_probe"};
  return kKinds;
}

// Every reply case, each filled with something, for job `id`.
std::vector<HarnessResult> EveryReply(const std::string& id, const std::string& text) {
  std::vector<HarnessResult> all(7);
  all[0].mutable_hello()->set_torch(text);
  all[1].mutable_verify()->mutable_facts()->set_ref_error(text);
  all[2].mutable_health()->set_error(text);
  all[3].mutable_isolation_probe()->set_error(text);
  all[4].mutable_recorder_probe()->set_error(text);
  all[5].set_zygote_error(text);
  all[6].mutable_copy_probe()->set_error(text);
  for (HarnessResult& r : all) r.set_job_id(id);
  return all;
}

class HarnessReplyTest : public ::testing::Test {
 protected:
  std::string Word() { return absl::StrCat("w", std::uniform_int_distribution<int>(0, 1 << 30)(rng_)); }
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(HarnessReplyTest, OnlyTheReplyTheKindNamesAnswersTheJob) {
  const std::string id = Word(), text = Word();
  for (const std::string& kind : JobKinds()) {
    HarnessJob job;
    job.set_kind(kind);
    job.set_job_id(id);
    const HarnessResult::ReplyCase want = ReplyCaseFor(kind);
    ASSERT_NE(want, HarnessResult::REPLY_NOT_SET) << kind;
    EXPECT_EQ(ReplyCaseName(want), kind) << "a job kind is answered by the reply of its own name";
    int answered = 0;
    for (const HarnessResult& r : EveryReply(id, text)) {
      const absl::Status s = CheckHarnessReply(job, r);
      const std::string got = ReplyCaseName(r.reply_case());
      if (r.reply_case() == want) {
        EXPECT_TRUE(s.ok()) << kind << " / " << got << ": " << s;
        ++answered;
      } else if (r.reply_case() == HarnessResult::kZygoteError) {
        EXPECT_TRUE(absl::IsInternal(s)) << kind << ": " << s;
        EXPECT_TRUE(absl::StrContains(s.message(), text)) << "the zygote's text reaches the caller: " << s;
        EXPECT_TRUE(absl::StrContains(s.message(), kind)) << s;
      } else {
        EXPECT_TRUE(absl::IsDataLoss(s)) << kind << " / " << got << ": " << s;
        EXPECT_TRUE(absl::StrContains(s.message(), kind)) << s;
        EXPECT_TRUE(absl::StrContains(s.message(), got)) << s;
      }
    }
    EXPECT_EQ(answered, 1) << kind;
    // No reply at all is not an answer either.
    HarnessResult none;
    none.set_job_id(id);
    EXPECT_TRUE(absl::IsDataLoss(CheckHarnessReply(job, none))) << kind;
  }
}

TEST_F(HarnessReplyTest, AReplyForAnotherJobIsRejectedWhateverItHolds) {
  HarnessJob job;
  job.set_kind("health");
  job.set_job_id(Word());
  for (HarnessResult r : EveryReply(job.job_id() + "x", Word())) {
    const absl::Status s = CheckHarnessReply(job, r);
    EXPECT_TRUE(absl::IsDataLoss(s)) << ReplyCaseName(r.reply_case()) << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), job.job_id())) << s;
  }
}

TEST_F(HarnessReplyTest, UnknownJobKindIsInvalidArgument) {
  HarnessJob job;
  job.set_kind(Word());
  EXPECT_EQ(ReplyCaseFor(job.kind()), HarnessResult::REPLY_NOT_SET);
  EXPECT_EQ(ReplyCaseFor("hello"), HarnessResult::REPLY_NOT_SET) << "the hello answers no job";
  EXPECT_EQ(ReplyCaseFor("zygote_error"), HarnessResult::REPLY_NOT_SET);
  HarnessResult r;
  r.mutable_health();
  EXPECT_TRUE(absl::IsInvalidArgument(CheckHarnessReply(job, r)));
}

TEST_F(HarnessReplyTest, ParsesTheLinesTheZygoteWrites) {
  const std::string id = Word(), text = Word();
  const int threads = std::uniform_int_distribution<int>(1, 40)(rng_);
  const std::string rule = absl::StrCat("own processes: ", Word());  // health's memory_rule
  struct Line {
    std::string json;
    HarnessResult::ReplyCase want;
  };
  const std::vector<Line> lines = {
      {absl::StrCat(R"({"hello": {"caps": {"user_ns": true}, "torch": ")", text, R"(", "pid": 7}})"),
       HarnessResult::kHello},
      {absl::StrCat(R"({"verify": {"facts": {"exit_code": 0, "sets": [{"set": 0, "dist": ")", text,
                    R"(", "ok": true, "detail": ""}]}, "logs": {"contain": "x"}, "profile": {}}, "job_id": ")", id,
                    R"("})"),
       HarnessResult::kVerify},
      {absl::StrCat(R"({"health": {"healthy": true, "ok": true, "wall_ms": 3.5, "error": ")", text,
                    R"(", "memory_rule": ")", rule, R"("}, "job_id": ")", id, R"("})"),
       HarnessResult::kHealth},
      {absl::StrCat(R"({"isolation_probe": {"ok": false, "error": ")", text, R"("}, "job_id": ")", id, R"("})"),
       HarnessResult::kIsolationProbe},
      {absl::StrCat(R"({"recorder_probe": {"ok": true, "error": ")", text, R"(", "threads_started": )", threads,
                    R"(}, "job_id": ")", id, R"("})"),
       HarnessResult::kRecorderProbe},
      {absl::StrCat(R"({"zygote_error": ")", text, R"(", "job_id": ")", id, R"("})"), HarnessResult::kZygoteError},
      {absl::StrCat(R"({"copy_probe": {"ok": true, "error": ")", text,
                    R"(", "input_copy_bytes_per_us": 2051.5, "seal_bytes_per_us": 3790.25, "peak_bytes_per_us": 4800,)",
                    R"( "bytes": 2147483648}, "job_id": ")", id, R"("})"),
       HarnessResult::kCopyProbe},
  };
  for (const Line& line : lines) {
    absl::StatusOr<HarnessResult> r = ParseHarnessReply(line.json);
    ASSERT_TRUE(r.ok()) << line.json << ": " << r.status();
    EXPECT_EQ(r->reply_case(), line.want) << line.json;
    EXPECT_TRUE(absl::StrContains(r->DebugString(), text)) << line.json;
    if (line.want != HarnessResult::kHello) {
      EXPECT_EQ(r->job_id(), id);
    }
  }
  EXPECT_EQ(ParseHarnessReply(lines[4].json)->recorder_probe().threads_started(), threads);
  EXPECT_EQ(ParseHarnessReply(lines[2].json)->health().memory_rule(), rule);
}

TEST_F(HarnessReplyTest, RejectsUnknownKeysTwoRepliesAndTheUntaggedForm) {
  const std::string id = Word();
  const std::vector<std::string> bad = {
      // The form before the replies were tagged: fields of every reply at the top.
      absl::StrCat(R"({"healthy": true, "ok": true, "job_id": ")", id, R"("})"),
      absl::StrCat(R"({"type": "hello", "caps": {}})"),
      // A key no reply has (protocol drift between the zygote and the worker).
      absl::StrCat(R"({"health": {"healthy": true, "cuda_initialized": false}, "job_id": ")", id, R"("})"),
      // Two replies in one line.
      absl::StrCat(R"({"health": {"healthy": true}, "zygote_error": "x", "job_id": ")", id, R"("})"),
      // Not JSON.
      absl::StrCat(R"({"health": {"healthy": tru)"),
  };
  for (const std::string& line : bad) {
    absl::StatusOr<HarnessResult> r = ParseHarnessReply(line);
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << line << ": " << (r.ok() ? r->DebugString() : "");
  }
}

}  // namespace
}  // namespace kernelrl::sandbox
