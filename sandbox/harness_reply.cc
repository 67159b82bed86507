#include "sandbox/harness_reply.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace kernelrl::sandbox {
namespace {

using v1::sandbox::HarnessJob;
using v1::sandbox::HarnessResult;

// The job kinds and the reply that answers each (the hello and the zygote's
// own error answer no job kind).
constexpr std::pair<absl::string_view, HarnessResult::ReplyCase> kReplyFor[] = {
    {"verify", HarnessResult::kVerify},
    {"health", HarnessResult::kHealth},
    {"isolation_probe", HarnessResult::kIsolationProbe},
    {"recorder_probe", HarnessResult::kRecorderProbe},
    {"copy_probe", HarnessResult::kCopyProbe},
};

}  // namespace

absl::StatusOr<HarnessResult> ParseHarnessReply(absl::string_view line) {
  HarnessResult result;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // a key the worker does not know is protocol drift, not a detail
  if (auto s = google::protobuf::util::JsonStringToMessage(std::string(line), &result, opts); !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("bad zygote reply: ", s.ToString(), ": ", line.substr(0, 300)));
  }
  return result;
}

HarnessResult::ReplyCase ReplyCaseFor(absl::string_view kind) {
  for (const auto& [name, reply_case] : kReplyFor) {
    if (name == kind) return reply_case;
  }
  return HarnessResult::REPLY_NOT_SET;
}

std::string ReplyCaseName(HarnessResult::ReplyCase reply_case) {
  const google::protobuf::FieldDescriptor* f = HarnessResult::descriptor()->FindFieldByNumber(reply_case);
  return f == nullptr ? "no reply" : f->name();
}

absl::Status CheckHarnessReply(const HarnessJob& job, const HarnessResult& result) {
  const HarnessResult::ReplyCase want = ReplyCaseFor(job.kind());
  if (want == HarnessResult::REPLY_NOT_SET) {
    return absl::InvalidArgumentError(absl::StrCat("no harness job kind '", job.kind(), "'"));
  }
  if (result.job_id() != job.job_id()) {
    return absl::DataLossError(absl::StrCat("zygote answered job '", result.job_id(), "' to the ", job.kind(),
                                            " job '", job.job_id(), "'"));
  }
  if (result.reply_case() == HarnessResult::kZygoteError) {
    return absl::InternalError(absl::StrCat("zygote could not run the ", job.kind(), " job: ", result.zygote_error()));
  }
  if (result.reply_case() != want) {
    return absl::DataLossError(absl::StrCat("zygote answered the ", job.kind(), " job '", job.job_id(),
                                            "' with ", ReplyCaseName(result.reply_case()), " (expected ",
                                            ReplyCaseName(want), ")"));
  }
  return absl::OkStatus();
}

}  // namespace kernelrl::sandbox
