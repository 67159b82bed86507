// Helpers shared by the learner's tests: where to write, how to run the
// Python fixture generator (HF transformers/tokenizers as the reference).
#ifndef KERNELRL_LEARNER_TEST_UTIL_H_
#define KERNELRL_LEARNER_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/testing/testing.h"
#include "learner/model_config.h"

namespace kernelrl::learner::testing {

using ::kernelrl::testing::TempDir;

// Runs learner/testdata/make_fixtures.py MODE OUT with $KERNELRL_PYTHON (or
// python3). Returns the exit status (0 = ok).
inline int RunFixtureScript(const std::string& mode, const std::string& out) {
  std::string cmd = ::kernelrl::testing::Python() + " learner/testdata/make_fixtures.py " + mode + " '" + out +
                    "' > '" + out + "." + mode + ".log' 2>&1";
  return std::system(cmd.c_str());
}

// Multi-GPU tests run on as many GPUs as KERNELRL_TEST_DP_GPUS asks (default 2)
// and fail on a machine with fewer.
inline int DpTestGpus() {
  const char* want = std::getenv("KERNELRL_TEST_DP_GPUS");
  return want != nullptr ? std::atoi(want) : 2;
}

// The tiny Qwen2-shaped model the learner's tests build (2 layers, 4 heads,
// 2 KV heads, head_dim 8, hidden 32): fast on a CPU, every code path of the
// real architecture (GQA, RoPE, SwiGLU).
inline ModelConfig TinyQwen2Config(int64_t vocab_size) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = vocab_size;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  return c;
}

}  // namespace kernelrl::learner::testing

#endif  // KERNELRL_LEARNER_TEST_UTIL_H_
