// The RFT data filter of the CUDA-Agent recipe (torch-free): of the agent
// warm-up trajectories keep those with reward > 0 (outcome filter) and drop
// those with redundant loops or tool calls that break the schema (pattern
// filter). A redundant loop is one (tool, arguments) call made more than
// max_repeated_calls times; Compile / Verify / Profile count per version of
// the files (an edit between two Profiles makes the second a new evaluation).
#ifndef KERNELRL_LEARNER_RL_RFT_FILTER_H_
#define KERNELRL_LEARNER_RL_RFT_FILTER_H_

#include <string>

#include "proto/trajectory.pb.h"

namespace kernelrl::learner::rl {

// "" = keep; otherwise why it is dropped: "reward <= 0", "tool call breaks
// the schema: ...", "redundant loop: Bash {...} called 4 times".
std::string RftRejection(const v1::Trajectory& trajectory, int max_repeated_calls);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_RFT_FILTER_H_
