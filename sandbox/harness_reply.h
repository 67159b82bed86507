// The zygote's replies (HarnessResult in harness_protocol.proto): one JSON
// line each, parsed strictly, and checked against the job that asked for it.
// A job of kind K is answered by the reply case named K (a verify job by
// `verify`, ...); the zygote's first line holds `hello`. Anything else — a
// reply of another kind or for another job, the zygote's own `zygote_error`,
// a key the protocol does not know — is an absl::Status, never a reply whose
// fields read as empty.
#ifndef KERNELRL_SANDBOX_HARNESS_REPLY_H_
#define KERNELRL_SANDBOX_HARNESS_REPLY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/harness_protocol.pb.h"

namespace kernelrl::sandbox {

// One line from the zygote. DataLoss on malformed JSON, an unknown key, or
// two replies in one line.
absl::StatusOr<v1::sandbox::HarnessResult> ParseHarnessReply(absl::string_view line);

// The reply case that answers a job of `kind` (REPLY_NOT_SET: no such job kind).
v1::sandbox::HarnessResult::ReplyCase ReplyCaseFor(absl::string_view kind);

// The reply case's name as the proto spells it ("verify", "zygote_error";
// "no reply" when none is set).
std::string ReplyCaseName(v1::sandbox::HarnessResult::ReplyCase reply_case);

// OK when `result` answers `job`: the same job_id and the reply case its kind
// names. The zygote's `zygote_error` is Internal (it could not run the job,
// the text says why); any other mismatch is DataLoss (the zygote's replies no
// longer follow its jobs); an unknown job kind is InvalidArgument.
absl::Status CheckHarnessReply(const v1::sandbox::HarnessJob& job, const v1::sandbox::HarnessResult& result);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_HARNESS_REPLY_H_
