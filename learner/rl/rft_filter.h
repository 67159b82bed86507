// The RFT data filter of the CUDA-Agent recipe (torch-free): of the agent
// warm-up trajectories keep those with reward > 0 (outcome filter) and drop
// those with redundant loops or tool calls that break the schema (pattern
// filter). A redundant loop is one (tool, arguments) call made more than
// max_repeated_calls times; Compile / Verify / Profile count per version of
// the files (an edit between two Profiles makes the second a new evaluation).
//
// A small model often solves the task and then loses the schema until the
// turn cap: its broken calls run nothing, so the final evaluation scored the
// files the turns before them left. Such a trajectory is kept up to its first
// broken turn (its reward is that prefix's), unless a well-formed call after
// the break could have changed the files (Write, Edit, MultiEdit, Bash or a
// tool this filter does not know).
#ifndef KERNELRL_LEARNER_RL_RFT_FILTER_H_
#define KERNELRL_LEARNER_RL_RFT_FILTER_H_

#include <string>

#include "proto/trajectory.pb.h"

namespace kernelrl::learner::rl {

struct RftChoice {
  // "" = train on it; otherwise why it is dropped: "reward <= 0", "tool call
  // breaks the schema: ...", "redundant loop: Bash {...} called 4 times".
  std::string rejection;
  // The step metric a dropped trajectory counts under: "rft_dropped_reward",
  // "rft_dropped_loop" or "rft_dropped_schema" ("" when kept).
  std::string dropped_as;
  // Turns RFT trains on: all of them, or fewer when the tail that broke the
  // schema is cut (the trajectory's turns_size() when not cut).
  int turns = 0;
};

RftChoice ChooseForRft(const v1::Trajectory& trajectory, int max_repeated_calls);

// The trajectory's first `turns` turns and their tokens (up to the last kept
// turn's end); the reward, verdict and sampling stay.
v1::Trajectory RftPrefix(const v1::Trajectory& trajectory, int turns);

}  // namespace kernelrl::learner::rl

#endif  // KERNELRL_LEARNER_RL_RFT_FILTER_H_
