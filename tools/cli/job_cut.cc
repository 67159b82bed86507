#include "tools/cli/job_cut.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace kernelrl::cli {

JobCut CutForFinalEvaluation(absl::Time limit, absl::Duration longest_eval, absl::Time now) {
  JobCut cut;
  cut.reserve = longest_eval > absl::ZeroDuration() ? longest_eval * kEvalReserveFactor : absl::ZeroDuration();
  cut.at = std::max(now, limit - cut.reserve);
  return cut;
}

std::string DescribeCut(const JobCut& cut, absl::Duration longest_eval, absl::Time limit, absl::Time start,
                        const std::string& evaluation) {
  const auto s = [start](absl::Time t) { return absl::ToDoubleSeconds(t - start); };
  if (evaluation.empty()) return absl::StrFormat("job cut at the %.0f s limit (no evaluation after it)", s(limit));
  if (cut.reserve <= absl::ZeroDuration()) {
    return absl::StrFormat("job cut at the %.0f s limit: no held-out evaluation timed yet to leave room for the %s",
                           s(limit), evaluation);
  }
  // Facts, not a promise: a cut that came late (an evaluation that raised the reserve past the time
  // left) shows as less room than the reserve.
  return absl::StrFormat(
      "job cut at %.0f s, %.0f s before the %.0f s limit: room for the %s (~%.0f s: the longest so far %.0f s "
      "and a quarter)",
      s(cut.at), absl::ToDoubleSeconds(limit - cut.at), s(limit), evaluation,
      std::ceil(absl::ToDoubleSeconds(cut.reserve)), absl::ToDoubleSeconds(longest_eval));
}

}  // namespace kernelrl::cli
