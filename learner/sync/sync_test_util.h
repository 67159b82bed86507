// What the weight-sync tests share: tiny models, the weights a replica
// serves, ranks meeting on the CPU (the test store backend), the version an
// engine stamps on a reply.
#ifndef KERNELRL_LEARNER_SYNC_SYNC_TEST_UTIL_H_
#define KERNELRL_LEARNER_SYNC_SYNC_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "learner/dist/data_parallel.h"
#include "learner/dist/store_backend_for_test.h"
#include "learner/model.h"
#include "learner/policy/engine.h"
#include "learner/test_util.h"

namespace kernelrl::learner::sync_testing {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

inline std::unique_ptr<Transformer> Tiny(uint64_t seed, bool trainable, int64_t lora = 0) {
  ModelOptions o;
  o.trainable = trainable;
  o.lora_rank = lora;
  auto m = Transformer::Create(testing::TinyQwen2Config(32), Head::kLanguageModel, o, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

// The weights a replica serves: LoRA adapters merged in.
inline Named Snapshot(const Transformer& m) {
  Named out;
  for (auto& [name, t] : m.HFTensors(/*merged=*/true)) out.emplace_back(name, t.detach().to(at::kCPU).clone());
  return out;
}

inline void ExpectEqual(const Named& got, const Named& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << what;
    EXPECT_TRUE(at::equal(got[i].second, want[i].second)) << what << ": " << got[i].first;
  }
}

// Rank `rank` of `world` on the CPU, meeting at `store` (file://...).
inline absl::StatusOr<std::unique_ptr<dist::DataParallel>> Join(const std::string& store, int rank, int world) {
  return dist::DataParallel::Connect({rank, world, store, absl::Seconds(120)}, at::kCPU, [](auto s, int r, int n) {
    return c10::make_intrusive<dist::StoreBackendForTest>(s, r, n);
  });
}

// The version `engine` stamps on a short greedy generation.
inline int64_t Stamp(PolicyEngine* engine) {
  GenerationRequest req;
  req.prompt = {1, 5, 7};
  req.sampling.temperature = 0;
  req.sampling.max_new_tokens = 2;
  auto r = engine->Generate(std::move(req));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->policy_version : -1;
}

}  // namespace kernelrl::learner::sync_testing

#endif  // KERNELRL_LEARNER_SYNC_SYNC_TEST_UTIL_H_
