// Bounded echo: what a contained process printed (its errors, its logs) goes
// back to the actor, the policy's context and the learner's logs, so every
// copy of it is length-capped, and a cut copy says so and by how much: a
// reader never mistakes a truncated text for the whole.
#ifndef KERNELRL_SANDBOX_CONTAIN_ECHO_H_
#define KERNELRL_SANDBOX_CONTAIN_ECHO_H_

#include <cstddef>
#include <string>

namespace kernelrl::sandbox {

// The first `max` bytes (summaries: the start says what happened).
inline std::string CapHead(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, max) + " [... " + std::to_string(text.size() - max) + " bytes cut]";
}

// The last `max` bytes (logs: the end holds the error).
inline std::string CapTail(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return "[" + std::to_string(text.size() - max) + " bytes cut ...]\n" + text.substr(text.size() - max);
}

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_CONTAIN_ECHO_H_
