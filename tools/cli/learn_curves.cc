#include "tools/cli/learn_curves.h"

#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/sha256.h"
#include "learner/rl/ingest.h"
#include "learner/rl/ledger.h"
#include "profiler_service/judge.h"
#include "profiler_service/reward.h"
#include "profiler_service/stats.h"
#include "proto/trajectory.pb.h"

namespace kernelrl::cli {
namespace {

namespace rl = learner::rl;

std::string StrField(const Json& j, absl::string_view key) {
  const Json* v = FindJson(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

void Add(VerdictStats* s, double reward, bool ok, double x_eager, double x_compile) {
  ++s->n;
  s->reward_sum += reward;
  s->reward_sq_sum += reward * reward;
  s->passed += ok;
  s->faster_eager += ok && x_eager > 1.0;
  s->faster_compile += ok && x_compile > 1.0;
  s->faster_compile_paid += ok && reward >= kRewardFasterThanBoth;
}

}  // namespace

Json VerdictStats::ToJson() const {
  const double mean = n ? reward_sum / n : 0;
  const double var = n > 1 ? std::max(0.0, (reward_sq_sum - n * mean * mean) / (n - 1)) : 0;
  Json out = Json::object({{"n", Json(n)},
                           {"reward_mean", Json(mean)},
                           {"reward_sem", Json(n ? std::sqrt(var / n) : 0)},
                           {"pass_rate", Json(n ? 1.0 * passed / n : 0)},
                           {"faster_than_eager_rate", Json(n ? 1.0 * faster_eager / n : 0)},
                           {"faster_than_compile_rate", Json(n ? 1.0 * faster_compile / n : 0)},
                           {"faster_than_compile_paid_rate", Json(n ? 1.0 * faster_compile_paid / n : 0)}});
  if (n > 0 && wall_s > 0) {  // Trained trajectories (held-out figures come from a report without them).
    out["rollout_wall_s_mean"] = Json(wall_s / n);
    out["rollout_policy_s_mean"] = Json(policy_s / n);
    out["rollout_sandbox_s_mean"] = Json(sandbox_s / n);
  }
  if (!stop_reasons.empty()) {
    Json reasons = Json::object();
    for (const auto& [reason, k] : stop_reasons) reasons[reason] = Json(k);
    out["stop_reasons"] = std::move(reasons);
  }
  return out;
}

Json TrainedAudit::ToJson() const {
  return Json::object({{"trajectories_trained", Json(trajectories)},
                       {"hack_flagged", Json(hack_flagged)},
                       {"hack_flagged_with_reward_above_1", Json(hack_reward_above_1)},
                       {"compile_cache_hits", Json(compile_cache_hits)},
                       {"compiles", Json(compiles)},
                       {"compile_cache_hit_rate", Json(compiles ? 1.0 * compile_cache_hits / compiles : 0)},
                       {"integrity_flagged_with_reward_above_1", Json(flagged_reward_above_1)},
                       {"flags_seen", Json(absl::StrJoin(flags_seen, ","))},
                       {"verdicts_from_cache", Json(verdicts_cached)},
                       {"verdict_cache_hit_rate", Json(trajectories ? 1.0 * verdicts_cached / trajectories : 0)},
                       {"warmup_accepted", Json(warmup_accepted)},
                       {"warmup_from_engineer_actors", Json(warmup_from_engineer)},
                       {"warmup_imported", Json(warmup_imported)},
                       {"profiled_verdicts", Json(static_cast<int64_t>(profiled_wall_s.size()))},
                       {"profiled_verdict_wall_s_p50", Json(Median(profiled_wall_s))},
                       {"profiled_verdict_gpu_queue_s_p50", Json(Median(profiled_gpu_queue_s))},
                       {"profiled_verdict_lease_settle_s_p50", Json(Median(profiled_lease_settle_s))}});
}

absl::StatusOr<Json> UpdatesFromLedger(const std::string& job_dir, int64_t start_unix_ms) {
  auto ledger = rl::Ledger::Read(job_dir + "/ledger.jsonl");
  if (!ledger.ok()) return ledger.status();
  std::map<int64_t, Json> updates;  // step -> its point
  for (const v1::LedgerRecord& r : *ledger) {
    if (r.kind() == v1::LedgerRecord::UPDATE) {
      Json m = Json::object();
      for (const auto& [k, v] : r.metrics()) m[k] = Json(v);
      updates[r.step()] = Json::object({{"step", Json(r.step())},
                                        {"stage", Json(r.stage())},
                                        {"stage_step", Json(r.stage_step())},
                                        {"policy_version", Json(r.policy_version())},
                                        {"wall_s", Json((r.unix_ms() - start_unix_ms) / 1000.0)},
                                        {"metrics", std::move(m)}});
    } else if (r.kind() == v1::LedgerRecord::ROLLBACK) {
      updates.erase(updates.upper_bound(r.step()), updates.end());
    }
  }
  Json out = Json::array();
  for (auto& [step, point] : updates) out.push_back(std::move(point));
  return out;
}

absl::StatusOr<std::map<int64_t, VerdictStats>> TrainedStats(const std::string& job_dir, TrainedAudit* audit) {
  auto ledger = rl::Ledger::Read(job_dir + "/ledger.jsonl");
  if (!ledger.ok()) return ledger.status();
  std::map<std::string, int64_t> trained;  // trajectory id -> step (valid records)
  std::map<std::string, std::pair<std::string, std::string>> leases;  // lease id -> (actor, stage)
  for (const v1::LedgerRecord& r : *ledger) {
    if (r.kind() == v1::LedgerRecord::LEASED) {
      leases[r.lease_id()] = {r.actor_id(), r.stage()};
    } else if (r.kind() == v1::LedgerRecord::ACCEPTED && audit != nullptr) {
      if (r.lease_id().empty() && r.stage() == "agent_warmup") {  // Imported from an earlier job's warm-up.
        ++audit->warmup_accepted;
        ++audit->warmup_imported;
        continue;
      }
      const auto& [actor, stage] = leases[r.lease_id()];
      if (stage == "agent_warmup") {
        ++audit->warmup_accepted;
        audit->warmup_from_engineer += absl::StartsWith(actor, "engineer-");
      }
    } else if (r.kind() == v1::LedgerRecord::TRAINED) {
      trained[r.trajectory_id()] = r.step();
    } else if (r.kind() == v1::LedgerRecord::ROLLBACK) {
      for (auto it = trained.begin(); it != trained.end();) {
        it = it->second > r.step() ? trained.erase(it) : std::next(it);
      }
    }
  }
  std::map<int64_t, VerdictStats> out;
  for (const auto& [id, step] : trained) {
    auto read = rl::Ingest::ReadTrajectory(job_dir, id);
    if (!read.ok()) continue;
    const v1::Trajectory& t = *read;
    const v1::Verdict& v = t.final_verdict();
    VerdictStats& st = out[step];
    Add(&st, t.reward(), v.outcome() == v1::Verdict::OK, v.speedup_vs_eager(), v.speedup_vs_compile());
    st.wall_s += t.stats().wall_seconds(), st.policy_s += t.stats().policy_seconds();
    st.sandbox_s += t.stats().sandbox_seconds();
    ++st.stop_reasons[t.stats().stop_reason().empty() ? "unknown" : t.stats().stop_reason()];
    if (audit != nullptr) {
      ++audit->trajectories;
      const bool hack = v.outcome() == v1::Verdict::HACK_DETECTED || v.outcome() == v1::Verdict::SANDBOX_VIOLATION;
      audit->hack_flagged += hack;
      audit->hack_reward_above_1 += hack && t.reward() > 1;
      // The judge's own severities: an informational flag (noise, attribution, no baseline) says
      // nothing about integrity; an audit, decline or hack flag on a verdict paying more than 1 is
      // counted (the judge caps those at 1, so this must stay 0).
      bool integrity_flag = false;
      for (const std::string& f : v.flags()) {
        audit->flags_seen.insert(f);
        integrity_flag |= SeverityOf(f) != FlagSeverity::kInfo;
      }
      audit->flagged_reward_above_1 += integrity_flag && t.reward() > 1;
      audit->verdicts_cached += v.cached();
      double total_ms = -1, queue_ms = 0, settle_ms = 0;
      bool profiled = false;
      for (const v1::StageTiming& st : v.stages()) {
        if (st.stage() == "total") total_ms = st.wall_ms();
        if (st.stage() == "gpu_queue" || st.stage() == "gpu_lease" || st.stage() == "start_queue" ||
            st.stage() == "clock_queue") {
          queue_ms += st.wall_ms();
        }
        if (st.stage() == "lease_settle") settle_ms = st.wall_ms();
        profiled |= st.stage() == "profile";
        if (st.stage() != "compile") continue;
        ++audit->compiles;
        audit->compile_cache_hits += st.cache_hit();
      }
      if (profiled && total_ms >= 0) {
        audit->profiled_wall_s.push_back(total_ms / 1e3);
        audit->profiled_gpu_queue_s.push_back(queue_ms / 1e3);
        audit->profiled_lease_settle_s.push_back(settle_ms / 1e3);
      }
    }
  }
  return out;
}

absl::StatusOr<Json> HeldOutFromReport(const std::string& report_json_path) {
  auto text = ReadFileToString(report_json_path);
  if (!text.ok()) return text.status();
  auto report = ParseJson(*text);
  if (!report.ok()) return report.status();
  const Json* tasks = FindJson(*report, "tasks");
  if (tasks == nullptr || !tasks->is_array()) return absl::DataLossError(report_json_path + ": no tasks");
  VerdictStats s, sampled;
  double log_e = 0, log_c = 0, final_log_e = 0, final_log_c = 0;
  int profiled = 0, finals_profiled = 0, unjudged = 0;
  Json task_rewards = Json::object();  // Per task, its rollouts' mean reward: which tasks moved.
  Json task_compile = Json::object();  // Per task, the share of its rollouts faster than torch.compile.
  // Per task, the baselines' medians its rollouts were judged against: evaluations judged against
  // other baselines (measured again) do not compare (kernelrl seeds says so).
  Json task_baselines = Json::object();
  for (const Json& t : *tasks) {
    VerdictStats task;  // This task's judged rollouts.
    int task_unjudged = 0;
    Json baseline;
    if (const Json* finals = FindJson(t, "rollout_finals"); finals != nullptr && finals->is_array()) {
      for (const Json& f : *finals) {
        // The sandbox could not judge it (INFRA_ERROR, after the rollout's own retries): it says
        // nothing about the policy, so it is counted apart, not scored as a reward of 0.
        if (StrField(f, "outcome") == "INFRA_ERROR") {
          ++unjudged, ++task_unjudged;
          continue;
        }
        const Json* xe = FindJson(f, "speedup_vs_eager");
        const Json* xc = FindJson(f, "speedup_vs_compile");
        const Json* rew = FindJson(f, "reward");
        const double fe = xe ? JsonNumber(*xe) : 0, fc = xc ? JsonNumber(*xc) : 0;
        const bool fok = StrField(f, "outcome") == "OK";
        const Json* be = FindJson(f, "eager_time_us");
        const Json* bc = FindJson(f, "compile_time_us");
        if (baseline.is_null() && be != nullptr && JsonNumber(*be) > 0) {
          baseline = Json::object({{"eager_us", *be}, {"compile_us", bc ? *bc : Json(0)}});
        }
        Add(&sampled, rew ? JsonNumber(*rew) : -1, fok, fe, fc);
        Add(&task, rew ? JsonNumber(*rew) : -1, fok, fe, fc);
        if (fok && fe > 0 && fc > 0) ++finals_profiled, final_log_e += std::log(fe), final_log_c += std::log(fc);
      }
    }
    const Json* rew = FindJson(t, "reward");
    const Json* xe = FindJson(t, "speedup_vs_eager");
    const Json* xc = FindJson(t, "speedup_vs_compile");
    const double e = xe ? JsonNumber(*xe) : 0, c = xc ? JsonNumber(*xc) : 0;
    const bool ok = StrField(t, "outcome") == "OK";
    Add(&s, rew ? JsonNumber(*rew) : -1, ok, e, c);
    const std::string id = StrField(t, "task_id");
    // A report without rollout finals: the task's own figures. A task none of whose rollouts was
    // judged has none: a comparison of evaluations skips it.
    if (task.n == 0 && task_unjudged == 0) Add(&task, rew ? JsonNumber(*rew) : -1, ok, e, c);
    if (!id.empty() && task.n > 0) {
      task_rewards[id] = Json(task.reward_sum / task.n);
      task_compile[id] = Json(1.0 * task.faster_compile / task.n);
    }
    if (!id.empty() && !baseline.is_null()) task_baselines[id] = std::move(baseline);
    if (ok && e > 0 && c > 0) ++profiled, log_e += std::log(e), log_c += std::log(c);
  }
  Json out = s.ToJson();
  out["geomean_speedup_vs_eager"] = Json(profiled ? std::exp(log_e / profiled) : 0);
  out["geomean_speedup_vs_compile"] = Json(profiled ? std::exp(log_c / profiled) : 0);
  // The paper's per-task figure: each rollout's final kernel (correct and profiled ones), not the best.
  Json rollouts = sampled.ToJson();
  rollouts["geomean_speedup_vs_eager"] = Json(finals_profiled ? std::exp(final_log_e / finals_profiled) : 0);
  rollouts["geomean_speedup_vs_compile"] = Json(finals_profiled ? std::exp(final_log_c / finals_profiled) : 0);
  rollouts["unjudged"] = Json(static_cast<int64_t>(unjudged));
  out["rollouts"] = std::move(rollouts);
  out["task_rewards"] = std::move(task_rewards);
  out["task_faster_than_compile"] = std::move(task_compile);
  out["task_baselines"] = std::move(task_baselines);
  // An evaluation stopped at its limit scored only its finished tasks: whoever compares it must know.
  if (const Json* cut = FindJson(*report, "cut"); cut != nullptr && !cut->is_null()) out["cut"] = *cut;
  return out;
}

absl::StatusOr<Json> WeightsDigest(const std::string& hf_dir) {
  Json digest = Json::object();
  for (const std::string& name : ListDir(hf_dir)) {  // Sorted: shards in order.
    if (!absl::StartsWith(name, "model") || !absl::EndsWith(name, ".safetensors")) continue;
    auto sha = Sha256FileHex(hf_dir + "/" + name);
    if (!sha.ok()) return sha.status();
    digest[name] = Json(*sha);
  }
  if (digest.empty()) return absl::NotFoundError(absl::StrCat("no model*.safetensors in ", hf_dir));
  return digest;
}

absl::StatusOr<std::string> CheckpointPolicyDir(const std::string& job_dir, int64_t policy_version) {
  const std::string root = job_dir + "/checkpoints";
  for (const std::string& step : ListDir(root)) {
    if (!absl::StartsWith(step, "step-")) continue;
    auto manifest = ReadFileToString(absl::StrCat(root, "/", step, "/manifest.json"));
    if (!manifest.ok()) continue;
    auto m = ParseJson(*manifest);
    auto v = m.ok() ? GetJsonInt(*m, "policy_version", -1) : absl::StatusOr<int64_t>(-1);  // As LoadCheckpoint reads it.
    if (v.ok() && *v == policy_version) {
      return absl::StrCat(root, "/", step, "/policy");
    }
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint of policy v", policy_version, " left in ", root));
}

}  // namespace kernelrl::cli
