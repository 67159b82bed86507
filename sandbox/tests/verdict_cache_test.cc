// The verdict cache: keyed by the request's bytes; the serving rule
// (sandbox/verdict_cache.h) as a table of fresh verdicts and lookups; bounded
// uses and entries.
#include "sandbox/verdict_cache.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

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

v1::Verdict Fresh(v1::Verdict::Outcome o, double reward, double x_eager = 0, double time_us = 0,
                  bool quarantined = false) {
  v1::Verdict v;
  v.set_outcome(o);
  v.set_reward(reward);
  v.set_speedup_vs_eager(x_eager);
  v.set_speedup_vs_compile(x_eager * 0.8);
  v.set_candidate_time_us(time_us);
  v.set_quarantined(quarantined);
  return v;
}
v1::Verdict Ok(double reward, double x_eager = 1.5, double time_us = 123.5) {
  return Fresh(v1::Verdict::OK, reward, x_eager, time_us);
}

v1::VerdictCacheConfig Config(int entries, int uses, int confirmations = 0) {
  v1::VerdictCacheConfig c;
  c.set_max_entries(entries);
  c.set_max_uses(uses);
  c.set_min_confirmations(confirmations);
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

// One row: fresh verdicts recorded and lookups, in order, on one key.
// A lookup expects a miss (served = false) or a served verdict with the
// given outcome, reward and figures.
struct Step {
  bool lookup;
  v1::Verdict fresh;  // when !lookup
  bool served = false;
  v1::Verdict::Outcome outcome = v1::Verdict::OK;
  double reward = 0, x_eager = 0, time_us = 0;
};
Step Rec(const v1::Verdict& v) { return Step{false, v}; }
Step Miss() { return Step{true, {}, false}; }
Step Hit(v1::Verdict::Outcome o, double reward, double x_eager = 0, double time_us = 0) {
  return Step{true, {}, true, o, reward, x_eager, time_us};
}
Step HitOk(double reward, double x_eager, double time_us) { return Hit(v1::Verdict::OK, reward, x_eager, time_us); }

struct Row {
  const char* name;
  int max_uses;
  std::vector<Step> steps;
};

TEST(VerdictCache, RuleTable) {
  using V = v1::Verdict;
  const V hack = Fresh(V::HACK_DETECTED, -1);
  const V wrong = Fresh(V::WRONG_ANSWER, -1);
  const V infra = Fresh(V::INFRA_ERROR, 0);
  const std::vector<Row> rows = {
      {"one fresh OK is never replayed", 16, {Miss(), Rec(Ok(2)), Miss(), Miss()}},
      {"two agreeing fresh OKs are served", 16, {Rec(Ok(2)), Rec(Ok(2)), HitOk(2, 1.5, 123.5), HitOk(2, 1.5, 123.5)}},
      {"coin flip: HACK then OK poisons", 16,
       {Rec(hack), Miss(), Rec(Ok(1)), Miss(), Rec(Ok(1)), Rec(Ok(1)), Miss(), Rec(Ok(1)), Miss()}},
      {"coin flip: OK then WRONG poisons", 16, {Rec(Ok(1)), Rec(wrong), Rec(wrong), Rec(wrong), Miss()}},
      {"a fresh non-OK after a served OK poisons", 16,
       {Rec(Ok(3)), Rec(Ok(3)), HitOk(3, 1.5, 123.5), Rec(hack), Miss(), Rec(Ok(3)), Rec(Ok(3)), Miss()}},
      {"rewards that differ poison", 16, {Rec(Ok(3)), Rec(Ok(2)), Miss(), Rec(Ok(2)), Rec(Ok(2)), Miss()}},
      {"quarantine that differs poisons", 16,
       {Rec(Fresh(V::OK, 1, 9.0, 10, true)), Rec(Fresh(V::OK, 1, 0.9, 10, false)), Rec(Ok(1)), Rec(Ok(1)), Miss()}},
      {"the worst agreeing figures are served", 16,
       {Rec(Ok(2, 1.30, 100)), Rec(Ok(2, 1.20, 110)), HitOk(2, 1.20, 110), Rec(Ok(2, 1.40, 90)),
        HitOk(2, 1.20, 110), Rec(Ok(2, 1.10, 120)), HitOk(2, 1.10, 120)}},
      {"INFRA_ERROR says nothing about the bytes", 16,
       {Rec(infra), Rec(Ok(2)), Rec(infra), Miss(), Rec(Ok(2)), HitOk(2, 1.5, 123.5)}},
      {"agreeing WRONG_ANSWERs are served", 16,
       {Rec(wrong), Miss(), Rec(wrong), Hit(V::WRONG_ANSWER, -1)}},
      {"agreeing HACK_DETECTED or TIMEOUT are never served", 16,
       {Rec(hack), Rec(hack), Rec(hack), Miss()}},
      {"a machine-side non-OK before OKs poisons", 16,
       {Rec(Fresh(V::TIMEOUT, -1)), Rec(Ok(1)), Rec(Ok(1)), Rec(Ok(1)), Miss()}},
      {"spent after max_uses, then re-confirmed by two fresh", 2,
       {Rec(Ok(2)), Rec(Ok(2)), HitOk(2, 1.5, 123.5), HitOk(2, 1.5, 123.5), Miss(), Rec(Ok(2)), Miss(),
        Rec(Ok(2)), HitOk(2, 1.5, 123.5), HitOk(2, 1.5, 123.5), Miss()}},
      {"history outlives spending: a later disagreement still poisons", 1,
       {Rec(Ok(2)), Rec(Ok(2)), HitOk(2, 1.5, 123.5), Miss(), Rec(wrong), Rec(Ok(2)), Rec(Ok(2)), Miss()}},
  };
  std::mt19937_64 rng(std::random_device{}());
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    VerdictCache cache(Config(64, row.max_uses));
    const std::string key = VerdictCache::Key(Request(rng));
    for (size_t i = 0; i < row.steps.size(); ++i) {
      const Step& s = row.steps[i];
      if (!s.lookup) {
        cache.Record(key, s.fresh);
        continue;
      }
      const std::optional<v1::Verdict> got = cache.Lookup(key);
      ASSERT_EQ(got.has_value(), s.served) << "step " << i;
      if (!got) continue;
      EXPECT_TRUE(got->cached()) << "step " << i;
      EXPECT_EQ(got->outcome(), s.outcome) << "step " << i;
      EXPECT_EQ(got->reward(), s.reward) << "step " << i;
      EXPECT_DOUBLE_EQ(got->speedup_vs_eager(), s.x_eager) << "step " << i;
      EXPECT_DOUBLE_EQ(got->speedup_vs_compile(), s.x_eager * 0.8) << "step " << i;
      EXPECT_DOUBLE_EQ(got->candidate_time_us(), s.time_us) << "step " << i;
    }
  }
}

// The property behind the table, on random coin-flip histories: whatever was
// served for a key had, before it, at least two fresh verdicts since the key
// was last spent, all of them agreeing, none paying less, and no fresh verdict
// of the key ever disagreed with another before it was served.
TEST(VerdictCache, ServedNeverPaysMoreThanAnyFreshVerdict) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    VerdictCache cache(Config(8, 1 + static_cast<int>(rng() % 4)));
    const std::string key = VerdictCache::Key(Request(rng));
    std::vector<v1::Verdict> fresh;
    const int heads_in_64 = static_cast<int>(rng() % 65);  // bias of this candidate's coin
    for (int call = 0; call < 8; ++call) {
      if (std::optional<v1::Verdict> served = cache.Lookup(key)) {
        ASSERT_GE(fresh.size(), 2u);
        for (const v1::Verdict& f : fresh) {
          ASSERT_TRUE(VerdictCache::Agree(f, *served)) << "served after a disagreeing fresh verdict";
          ASSERT_LE(served->speedup_vs_eager(), f.speedup_vs_eager());
        }
        continue;
      }
      const bool heads = static_cast<int>(rng() % 64) < heads_in_64;
      const v1::Verdict v = heads ? Ok(2, 1.1 + (rng() % 100) / 100.0) : Fresh(v1::Verdict::HACK_DETECTED, -1);
      fresh.push_back(v);
      cache.Record(key, v);
    }
  }
}

TEST(VerdictCache, ConfirmationsAreAtLeastTwoAndConfigurable) {
  std::mt19937_64 rng(std::random_device{}());
  EXPECT_EQ(VerdictCache(Config(8, 4, 0)).min_confirmations(), 2);
  EXPECT_EQ(VerdictCache(Config(8, 4, 1)).min_confirmations(), 2);  // one lucky verdict is never replayed
  VerdictCache three(Config(8, 4, 3));
  const std::string key = VerdictCache::Key(Request(rng));
  three.Record(key, Ok(2));
  three.Record(key, Ok(2));
  EXPECT_FALSE(three.Lookup(key).has_value());
  three.Record(key, Ok(2));
  EXPECT_TRUE(three.Lookup(key).has_value());
}

TEST(VerdictCache, IgnoresServedCopies) {
  std::mt19937_64 rng(std::random_device{}());
  VerdictCache cache(Config(8, 4));
  const std::string key = VerdictCache::Key(Request(rng));
  v1::Verdict served = Ok(3);
  served.set_cached(true);  // a served copy is not a fresh evaluation
  cache.Record(key, Ok(3));
  cache.Record(key, served);
  EXPECT_FALSE(cache.Lookup(key).has_value());
}

TEST(VerdictCache, EvictsTheOldestAndIsOffByDefault) {
  std::mt19937_64 rng(std::random_device{}());
  VerdictCache cache(Config(3, 100));
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(VerdictCache::Key(Request(rng)));
    cache.Record(keys.back(), Ok(1 + i % 3));
    cache.Record(keys.back(), Ok(1 + i % 3));
  }
  EXPECT_FALSE(cache.Lookup(keys[0]).has_value());
  for (int i = 1; i < 4; ++i) EXPECT_EQ(cache.Lookup(keys[i])->reward(), 1 + i % 3);
  VerdictCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.poisoned, 0);

  // Poisoned keys are bounded the same way.
  for (int i = 0; i < 5; ++i) {
    const std::string k = VerdictCache::Key(Request(rng));
    cache.Record(k, Ok(1));
    cache.Record(k, Fresh(v1::Verdict::WRONG_ANSWER, -1));
  }
  EXPECT_EQ(cache.stats().poisoned, 3);

  VerdictCache off(v1::VerdictCacheConfig{});
  EXPECT_FALSE(off.enabled());
  off.Record(keys[1], Ok(3));
  off.Record(keys[1], Ok(3));
  EXPECT_FALSE(off.Lookup(keys[1]).has_value());
  EXPECT_EQ(off.stats().misses, 0);
}

}  // namespace
}  // namespace kernelrl::sandbox
