// The verdict cache: keyed by the request's bytes, bounded uses, only outcomes
// that belong to the bytes, oldest entries evicted first.
#include "sandbox/verdict_cache.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

std::string RandomText(std::mt19937_64& rng, int n) {
  std::string s(n, ' ');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

void AddFile(v1::EvaluateRequest& r, const std::string& path, const std::string& content) {
  v1::WorkspaceFile* f = r.mutable_workspace()->add_files();
  f->set_path(path);
  f->set_content(content);
}

v1::EvaluateRequest Request(std::mt19937_64& rng) {
  v1::EvaluateRequest r;
  r.mutable_task()->set_id("task-" + RandomText(rng, 6));
  r.mutable_task()->set_reference_source("class Model: pass  # " + RandomText(rng, 40));
  AddFile(r, "kernels/a.cu", RandomText(rng, 200));
  AddFile(r, "model_new.py", RandomText(rng, 100));
  return r;
}

v1::Verdict Ok(double reward) {
  v1::Verdict v;
  v.set_outcome(v1::Verdict::OK);
  v.set_reward(reward);
  v.set_candidate_time_us(123.5);
  return v;
}

v1::VerdictCacheConfig Config(int entries, int uses) {
  v1::VerdictCacheConfig c;
  c.set_max_entries(entries);
  c.set_max_uses(uses);
  return c;
}

TEST(VerdictCache, KeyCoversEveryByte) {
  std::mt19937_64 rng(std::random_device{}());
  const v1::EvaluateRequest r = Request(rng);
  const std::string key = VerdictCache::Key(r);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(VerdictCache::Key(v1::EvaluateRequest(r)), key);

  v1::EvaluateRequest edited = r;  // One character of the kernel.
  std::string* cu = edited.mutable_workspace()->mutable_files(0)->mutable_content();
  (*cu)[rng() % cu->size()] ^= 1;
  EXPECT_NE(VerdictCache::Key(edited), key);

  v1::EvaluateRequest other_task = r;
  other_task.mutable_task()->set_reference_source(r.task().reference_source() + " ");
  EXPECT_NE(VerdictCache::Key(other_task), key);

  v1::EvaluateRequest no_profile = r;
  no_profile.set_skip_profile(true);
  EXPECT_NE(VerdictCache::Key(no_profile), key);

  v1::EvaluateRequest moved = r;  // The same bytes under another name.
  moved.mutable_workspace()->mutable_files(0)->set_path("kernels/b.cu");
  EXPECT_NE(VerdictCache::Key(moved), key);
}

TEST(VerdictCache, ServesAnEntryMaxUsesTimesThenJudgesAfresh) {
  std::mt19937_64 rng(std::random_device{}());
  const int uses = 2 + static_cast<int>(rng() % 5);
  VerdictCache cache(Config(8, uses));
  const std::string key = VerdictCache::Key(Request(rng));
  EXPECT_FALSE(cache.Lookup(key).has_value());
  cache.Store(key, Ok(2));
  for (int i = 0; i < uses; ++i) {
    auto hit = cache.Lookup(key);
    ASSERT_TRUE(hit.has_value()) << "use " << i;
    EXPECT_TRUE(hit->cached());
    EXPECT_EQ(hit->reward(), 2);
    EXPECT_EQ(hit->candidate_time_us(), 123.5);
  }
  EXPECT_FALSE(cache.Lookup(key).has_value());  // Spent: the next request runs.
  const VerdictCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, uses);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.entries, 0);
}

TEST(VerdictCache, KeepsOnlyOutcomesOfTheBytes) {
  std::mt19937_64 rng(std::random_device{}());
  VerdictCache cache(Config(64, 4));
  for (int o = v1::Verdict::OK; o <= v1::Verdict::BAD_WORKSPACE; ++o) {
    v1::Verdict v;
    v.set_outcome(static_cast<v1::Verdict::Outcome>(o));
    const std::string key = VerdictCache::Key(Request(rng));
    cache.Store(key, v);
    const bool kept = o != v1::Verdict::TIMEOUT && o != v1::Verdict::CRASH && o != v1::Verdict::CUDA_ERROR &&
                      o != v1::Verdict::INFRA_ERROR && o != v1::Verdict::HACK_DETECTED;
    EXPECT_EQ(cache.Lookup(key).has_value(), kept) << v1::Verdict::Outcome_Name(v.outcome());
  }
  v1::Verdict served = Ok(1);
  served.set_cached(true);  // A served copy is never stored again (its uses would restart).
  const std::string key = VerdictCache::Key(Request(rng));
  cache.Store(key, served);
  EXPECT_FALSE(cache.Lookup(key).has_value());
}

TEST(VerdictCache, EvictsTheOldestAndIsOffByDefault) {
  std::mt19937_64 rng(std::random_device{}());
  VerdictCache cache(Config(3, 100));
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(VerdictCache::Key(Request(rng)));
    cache.Store(keys.back(), Ok(1 + i % 3));
  }
  EXPECT_FALSE(cache.Lookup(keys[0]).has_value());
  for (int i = 1; i < 4; ++i) EXPECT_EQ(cache.Lookup(keys[i])->reward(), 1 + i % 3);

  VerdictCache off(v1::VerdictCacheConfig{});
  EXPECT_FALSE(off.enabled());
  off.Store(keys[1], Ok(3));
  EXPECT_FALSE(off.Lookup(keys[1]).has_value());
  EXPECT_EQ(off.stats().misses, 0);
}

}  // namespace
}  // namespace kernelrl::sandbox
