// Transcript: a rollout's trajectory as text a person reads. One header (task,
// trajectory id, turns, tokens, why it stopped, the final verdict), then every
// turn in order: its role, the policy version and token count of assistant
// turns, its text as the model saw or wrote it, and the verdict of a tool turn
// that evaluated. Tokens, logprobs and sandbox logs are left out.
#ifndef KERNELRL_ACTOR_TRANSCRIPT_H_
#define KERNELRL_ACTOR_TRANSCRIPT_H_

#include <string>

#include "proto/trajectory.pb.h"

namespace kernelrl::actor {

std::string Transcript(const v1::Trajectory& trajectory);

// "heldout/ew_relu_48x45" and rollout 2 -> "heldout-ew_relu_48x45-2.txt": a task id
// as one file name (no '/'), one per task and rollout.
std::string TranscriptFileName(const std::string& task_id, int rollout);
// The same name for the rollout's Trajectory itself: "heldout-ew_relu_48x45-2.pb".
std::string TrajectoryFileName(const std::string& task_id, int rollout);

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_TRANSCRIPT_H_
