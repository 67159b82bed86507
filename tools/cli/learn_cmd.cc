#include "tools/cli/learn_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "actor/eval_report.h"
#include "common/config.h"
#include "common/file.h"
#include "common/json.h"
#include "common/text.h"
#include "grpcpp/grpcpp.h"
#include "learner/rl/jobs.h"
#include "proto/learner.grpc.pb.h"
#include "proto/learner_config.pb.h"
#include "tools/cli/job_cut.h"
#include "tools/cli/learn_cluster.h"
#include "tools/cli/learn_curves.h"
#include "tools/cli/learn_report.h"

namespace kernelrl::cli {
namespace {

namespace fs = std::filesystem;

// The learner (job API + policy server) and the sandbox workers; their addresses go to the cluster.
// On learner_device cuda:N the learner runs on GPU N alone. Sandbox worker i times on GPU
// sandbox_first_gpu + i; a worker on the learner's GPU shares one GPU lease with it
// (common/gpu_lease.h): the learner's steps pause while that worker times a verdict.
absl::Status StartServices(const v1::LearnConfig& o, Cluster* cluster) {
  const int gpu = LearnerGpu(o);
  std::vector<std::string> env;
  if (gpu >= 0) env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", gpu));
  auto learner = cluster->StartServer("learner", "learner/learner_main", LearnerArgs(o),
                                      absl::Now() + absl::Seconds(180), env);
  if (!learner.ok()) return learner.status();
  cluster->learner_ = *learner;
  for (int w = 0; w < o.sandbox_workers(); ++w) {
    // Its verdicts name it <host>/gpu<w> (SandboxConfig.worker_id's default).
    std::vector<std::string> sandbox_args = {"--set=backend=" + o.backend(), absl::StrCat("--set=gpu_index=", SandboxWorkerGpu(o, w))};
    if (LearnerSharesSandboxGpu(o, w)) sandbox_args.push_back(GpuLeaseFlag(o));
    auto sandbox = cluster->StartServer(w == 0 ? "sandbox" : absl::StrCat("sandbox-", w), "sandbox/sandbox_main",
                                        sandbox_args, absl::Now() + absl::Seconds(180));
    if (!sandbox.ok()) return sandbox.status();
    cluster->sandboxes_.push_back(*sandbox);
  }
  return absl::OkStatus();
}

// Resumes a paused job (ResumeJob RPC); `job` receives its state.
grpc::Status ResumeJob(v1::Learner::Stub* stub, const std::string& job_id, v1::Job* job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ResumeJobRequest resume;
  resume.set_job_id(job_id);
  return stub->ResumeJob(&ctx, resume, job);
}

// Submits the job, or (resume_id set) finds the one the learner resumed on start, which must still be
// RUNNING, and resumes it if the last sitting paused it.
grpc::Status SubmitOrResume(v1::Learner::Stub* stub, const std::string& resume_id, const v1::JobSpec& spec, v1::Job* job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (resume_id.empty()) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    return stub->SubmitJob(&ctx, req, job);
  }
  v1::GetJobRequest get;
  get.set_job_id(resume_id);
  if (grpc::Status s = stub->GetJob(&ctx, get, job); !s.ok()) return s;
  if (job->state() != v1::Job::RUNNING) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job ", job->id(), " is ", v1::Job::State_Name(job->state()), ": nothing to resume"));
  }
  if (!job->paused()) return grpc::Status::OK;
  return ResumeJob(stub, job->id(), job);
}

// What --resume continues: the run dir's one job, its held-out evaluations so far and the run's start.
struct PausedRun {
  std::string job_id;
  Json heldout = Json::array();
  absl::Time start = absl::Now();
  std::string note;  // Said on the console when not empty.
};

absl::StatusOr<PausedRun> ReadPausedRun(const std::string& run_dir) {
  PausedRun r;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir + "/learner-state/jobs", ec)) {
    if (!entry.is_directory()) continue;
    if (!r.job_id.empty()) return absl::FailedPreconditionError(run_dir + " holds more than one job");
    r.job_id = entry.path().filename().string();
  }
  if (r.job_id.empty()) return absl::NotFoundError("no job under " + run_dir + "/learner-state/jobs to resume");
  const std::string path = absl::StrCat(run_dir, "/learner-state/jobs/", r.job_id, "/curves/curves.json");
  if (!fs::exists(path)) {  // The last sitting was killed before it wrote them: the job itself goes on.
    r.note = "no curves.json from the last sitting: its held-out evaluations are lost, seconds count from now";
    return r;
  }
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto curves = ParseJson(*text);
  if (!curves.ok()) return absl::DataLossError(path + ": " + std::string(curves.status().message()));
  if (const Json* h = FindJson(*curves, "heldout")) r.heldout = *h;
  if (const Json* t = FindJson(*curves, "start_unix_ms")) r.start = absl::FromUnixMillis(static_cast<int64_t>(JsonNumber(*t)));
  return r;
}

// One held-out evaluation with `kernelrl eval` (this binary), as a child process, given the time left
// to `until` as its wall_limit_s: one that reaches it reports the tasks it finished by then and
// records the cut (HeldOutFromReport's "cut").
absl::StatusOr<Json> HeldOutEval(const v1::LearnConfig& o, const Cluster& c, const std::string& out_dir,
                                 absl::Time until) {
  std::vector<std::string> args = {
      SelfExe(), "eval", "--config_text=actor { rollout { " + TextProto(o.rollout()) + " } }",
      "--set=task_dirs=" + o.family_dir() + "/heldout", "--set=output_dir=" + out_dir,
      absl::StrCat("--set=max_tasks_per_level=", o.eval_tasks()),
      absl::StrCat("--set=rollouts_per_task=", o.eval_rollouts()), "--set=plot_script=",
      "--set=actor.tokenizer_path=" + o.base_checkpoint() + "/tokenizer.json",
      "--set=actor.sandbox.target=" + c.SandboxTarget(), "--set=actor.sandbox.health_check=true",
      "--set=actor.policy.kind=grpc",
      "--set=actor.policy.address=" + c.learner_, absl::StrCat("--set=actor.rollout.eval_max_turns=", EvalMaxTurns(o)),
      absl::StrCat("--set=actor.rollout.temperature=", o.eval_temperature()),
      "--set=actor.rollout.skill_path=" + c.SkillPath(), "--set=actor.rollout.workspace_root=" + out_dir + "-ws",
      // As many rollouts at once as all the training actors run: an evaluation beside training gets
      // half the sandbox instead of 1 / (actors + 1) of it, so it ends near the policy it started with.
      absl::StrCat("--set=actor.concurrent_rollouts=", std::max(1, o.actors()) * o.concurrent_rollouts()),
      // At least a second: 0 would mean no limit.
      absl::StrFormat("--set=wall_limit_s=%.3f", std::max(1.0, absl::ToDoubleSeconds(until - absl::Now())))};
  std::error_code ec;
  fs::create_directories(out_dir + "-ws", ec);
  std::string cmd;
  for (const std::string& a : args) absl::StrAppend(&cmd, ShellQuote(a), " ");
  absl::StrAppend(&cmd, "> ", ShellQuote(out_dir + ".log"), " 2>&1");
  if (std::system(cmd.c_str()) != 0) return absl::InternalError("kernelrl eval failed; see " + out_dir + ".log");
  return HeldOutFromReport(out_dir + "/report.json");
}

// Cancels the job and waits (up to 60 s) for its runner to stop, so the curves say CANCELLED.
v1::Job CancelAndWait(v1::Learner::Stub* stub, v1::Job job) {
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::CancelJobRequest cancel;
    cancel.set_job_id(job.id());
    cancel.set_reason("kernelrl learn: --job_timeout_s or --stall_timeout_s");
    v1::Job now;
    if (stub->CancelJob(&ctx, cancel, &now).ok()) job = now;
  }
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  for (const absl::Time until = absl::Now() + absl::Seconds(60);
       !learner::rl::JobManager::Finished(job.state()) && absl::Now() < until; absl::SleepFor(absl::Milliseconds(200))) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::Job now;
    if (stub->GetJob(&ctx, get, &now).ok()) job = now;
  }
  return job;
}

// Pauses the job (the learner takes no new batch and grants no lease) and waits until the trainer
// holds: from then on the job's policy is the one an evaluation measures. The job comes back held,
// or ended when the update in progress was its last. With `cluster` its actors stop too (the
// sitting is over; their rollouts in flight are pushed and kept for the next one); without, they
// stay up and take no lease while the job is paused.
absl::StatusOr<v1::Job> PauseAndHold(v1::Learner::Stub* stub, const std::string& job_id, const std::string& reason,
                                     Cluster* cluster) {
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::PauseJobRequest pause;
    pause.set_job_id(job_id);
    pause.set_reason(reason);
    if (grpc::Status s = stub->PauseJob(&ctx, pause, &job); !s.ok()) return absl::InternalError(s.error_message());
  }
  if (cluster != nullptr) cluster->StopActors();
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  for (const absl::Time until = absl::Now() + absl::Minutes(10); absl::Now() < until; absl::SleepFor(absl::Milliseconds(200))) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (grpc::Status s = stub->GetJob(&ctx, get, &job); !s.ok()) return absl::InternalError(s.error_message());
    if (job.held() || job.state() != v1::Job::RUNNING) return job;  // Or its last update ended it.
  }
  return absl::DeadlineExceededError("the trainer did not reach a step boundary in 10 minutes");
}

std::string F(double v) { return absl::StrFormat("%.3g", v); }

// "reward m +- sem, pass p, >eager e, >compile c" of one set of held-out figures.
std::string Figures(const Json& e) {
  return absl::StrCat("reward ", F(JsonNumber(*FindJson(e, "reward_mean"))), " +- ", F(JsonNumber(*FindJson(e, "reward_sem"))),
                      ", pass ", F(JsonNumber(*FindJson(e, "pass_rate"))), ", >eager ",
                      F(JsonNumber(*FindJson(e, "faster_than_eager_rate"))), ", >compile ",
                      F(JsonNumber(*FindJson(e, "faster_than_compile_rate"))));
}

// The policy's figures first (every rollout's final verdict, what the report's "per rollout" rows
// show), then each task's best verdict over its rollouts and turns, which can be higher even with
// one rollout a task: a kernel that passed in an earlier turn counts there.
std::string HeldOutLine(const Json& heldout) {
  const Json* r = FindJson(heldout, "rollouts");
  const Json* n = r == nullptr ? nullptr : FindJson(*r, "n");
  if (n == nullptr || JsonNumber(*n) <= 0) return Figures(heldout);
  const Json* unjudged = FindJson(*r, "unjudged");
  const std::string left_out = unjudged != nullptr && JsonNumber(*unjudged) > 0
                                   ? absl::StrCat(", ", F(JsonNumber(*unjudged)), " unjudged left out")
                                   : "";
  return absl::StrCat("per rollout (n ", F(JsonNumber(*n)), left_out, ") ", Figures(*r), "; best per task ",
                      Figures(heldout));
}

// Held-out evaluations, one at a time in their own thread; each result goes to the console and to
// the list curves.json keeps. An evaluation while the job trains (StartPinned) first holds the job
// at a step boundary and resumes it after: the actors sample from the learner's live policy, so an
// evaluation beside training would mix the versions of every update it overlapped (on one H200 the
// "PPO start" evaluation spanned 4 updates). Each evaluation's wall time is kept: the longest sets
// how early the job is cut so that the evaluation after it still fits (job_cut.h).
class HeldOutEvaluator {
 public:
  // `heldout`: the run's evaluations so far (a resumed run's earlier sittings), their times included.
  // Until one is timed, the longest is the one expected (o.expected_eval_s).
  HeldOutEvaluator(const v1::LearnConfig& o, const Cluster& cluster, Console& console, std::string curves_dir, Json heldout)
      : o_(o), cluster_(cluster), console_(console), curves_dir_(std::move(curves_dir)), heldout_(std::move(heldout)),
        longest_(absl::Seconds(o.expected_eval_s())) {
    for (const Json& e : heldout_) {
      if (const Json* t = FindJson(e, "eval_seconds")) longest_ = std::max(longest_, absl::Seconds(JsonNumber(*t)));
    }
  }
  ~HeldOutEvaluator() { Join(); }

  // False (and nothing started) while one runs. For a job that does not update meanwhile (before
  // its first batch, or ended). Each evaluation stops by `until` (HeldOutEval).
  bool Start(const std::string& label, int64_t version, int64_t agentic_step, absl::Time until) {
    return Launch(label, version, agentic_step, nullptr, "", until);
  }
  // The policy of job `job_id` as the trainer holds it: paused for the evaluation, then resumed.
  bool StartPinned(const std::string& label, int64_t agentic_step, v1::Learner::Stub* stub, const std::string& job_id,
                   absl::Time until) {
    return Launch(label, -1, agentic_step, stub, job_id, until);
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  Json Heldout() {
    std::lock_guard<std::mutex> lock(mu_);
    return heldout_;
  }
  // The longest evaluation this run has timed (failed ones too); zero before any.
  absl::Duration LongestEval() {
    std::lock_guard<std::mutex> lock(mu_);
    return longest_;
  }

 private:
  bool Launch(const std::string& label, int64_t version, int64_t agentic_step, v1::Learner::Stub* stub,
              const std::string& job_id, absl::Time until) {
    if (busy_.exchange(true)) return false;
    Join();
    thread_ = std::thread([this, label, version, agentic_step, stub, job_id, until]() mutable {
      bool resume = false;
      if (stub != nullptr) {
        auto held = PauseAndHold(stub, job_id, "held-out evaluation " + label, nullptr);
        if (!held.ok() || !held->held()) {  // Ended meanwhile (its last policy), or the pause failed.
          console_.Line("held-out eval " + label + ": the job was not held (" +
                        (held.ok() ? v1::Job::State_Name(held->state()) : std::string(held.status().message())) +
                        "); the final evaluation scores its last policy");
          busy_ = false;
          return;
        }
        version = held->policy_version();
        resume = true;
      }
      const double t0 = console_.Seconds();
      auto r = HeldOutEval(o_, cluster_, curves_dir_ + "/eval-" + label, until);
      if (resume) {
        v1::Job resumed;
        if (grpc::Status s = ResumeJob(stub, job_id, &resumed); !s.ok()) {
          console_.Line("resume after " + label + ": " + s.error_message());
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      longest_ = std::max(longest_, absl::Seconds(console_.Seconds() - t0));
      if (r.ok()) {
        (*r)["label"] = Json(label);
        (*r)["policy_version"] = Json(version);
        (*r)["agentic_step"] = Json(agentic_step);
        (*r)["wall_s"] = Json(t0);
        (*r)["eval_seconds"] = Json(console_.Seconds() - t0);
        console_.Line(absl::StrCat("held-out eval ", label, " (policy v", version, "): ", HeldOutLine(*r)));
        heldout_.push_back(std::move(*r));
      } else {
        console_.Line("held-out eval " + label + " failed: " + std::string(r.status().message()));
      }
      busy_ = false;
    });
    return true;
  }

  const v1::LearnConfig& o_;
  const Cluster& cluster_;
  Console& console_;
  const std::string curves_dir_;
  std::mutex mu_;
  Json heldout_;  // Guarded by mu_.
  absl::Duration longest_;  // Guarded by mu_.
  std::atomic<bool> busy_{false};
  std::thread thread_;
};

// The fields every curves.json opens with: which job, when, in which state, of what run and settings.
Json CurvesHeader(const v1::LearnConfig& o, const std::string& hp, const Console& console, const std::string& job_id,
                  const std::string& state) {
  return Json::object({{"job_id", Json(job_id)},
                       {"start_unix_ms", Json(console.StartUnixMs())},
                       {"state", Json(state)},
                       {"ablation", Json(o.ablation())},
                       {"backend", Json(o.backend())},
                       {"family_dir", Json(o.family_dir())},
                       {"hyperparameters_text", Json(hp)}});
}

// curves.json from the job's ledger (every committed update, as the learner recorded it, with the
// verdicts of the trajectories it trained on) and the held-out evaluations; then the plots. The
// report's steps and audit come back in `run`.
bool WriteCurves(const v1::LearnConfig& o, const v1::Job& job, const std::string& hp, const std::string& job_dir,
                 Json heldout, Console& console, LearnRun& run) {
  const std::string curves_dir = job_dir + "/curves";
  auto steps = UpdatesFromLedger(job_dir, console.StartUnixMs());
  if (!steps.ok()) {
    console.Line("no curves: the job's ledger cannot be read: " + std::string(steps.status().message()));
    return false;
  }
  TrainedAudit audit;
  auto trained = TrainedStats(job_dir, &audit);
  Json step_list = Json::array();
  for (const Json& s : *steps) {
    Json copy = s;
    const int64_t step = static_cast<int64_t>(JsonNumber(*FindJson(s, "step")));
    if (trained.ok() && trained->count(step)) copy["trained"] = trained->at(step).ToJson();
    step_list.push_back(std::move(copy));
  }
  // Which weights the job started from and ended with, and which each evaluation scored (while its
  // checkpoint is kept): a job continuing this one is checked against them (`kernelrl seeds`).
  auto digest = [&console](const std::string& what, const absl::StatusOr<std::string>& dir) {
    absl::StatusOr<Json> d = dir.ok() ? WeightsDigest(*dir) : absl::StatusOr<Json>(dir.status());
    if (!d.ok()) console.Line("no record of the " + what + " weights: " + std::string(d.status().message()));
    return d.ok() ? *d : Json();
  };
  if (heldout.is_array()) {
    for (Json& e : heldout) {
      const Json* v = FindJson(e, "policy_version");
      if (FindJson(e, "weights") != nullptr || v == nullptr || !v->is_number() || JsonNumber(*v) < 0) continue;
      if (auto dir = CheckpointPolicyDir(job_dir, static_cast<int64_t>(JsonNumber(*v))); dir.ok()) {
        if (Json d = digest("evaluated", dir); !d.is_null()) e["weights"] = std::move(d);
      }
    }
  }
  Json curves = CurvesHeader(o, hp, console, job.id(), v1::Job::State_Name(job.state()));
  curves["steps"] = std::move(step_list);
  curves["heldout"] = std::move(heldout);
  curves["audit"] = audit.ToJson();
  if (Json d = digest("start", o.base_checkpoint()); !d.is_null()) curves["start_weights"] = std::move(d);
  if (run.checkpoint.empty()) {
    console.Line("no record of the final weights: the job committed no checkpoint");
  } else if (Json d = digest("final", run.checkpoint); !d.is_null()) {
    curves["final_weights"] = std::move(d);
  }
  const bool written = WriteFileAtomically(curves_dir + "/curves.json", DumpJson(curves, 1) + "\n").ok();
  run.steps = curves["steps"];
  run.audit = curves["audit"];
  console.Line(absl::StrCat("audit: ", DumpJson(run.audit)));
  if (!o.plot_script().empty()) {
    const std::string cmd = absl::StrCat(ShellQuote(o.python()), " ", ShellQuote(o.plot_script()), " ",
                                         ShellQuote(curves_dir + "/curves.json"), " ", ShellQuote(curves_dir), " > ",
                                         ShellQuote(curves_dir + "/plots.log"), " 2>&1");
    if (std::system(cmd.c_str()) != 0) console.Line("plots failed; see " + curves_dir + "/plots.log");
  }
  return written;
}

// What a run keeps of its --job_timeout_s after its last evaluation: curves.json written and the
// services stopped. Every evaluation of the run ends by the limit less this (cut there: HeldOutEval).
constexpr absl::Duration kEvalMargin = absl::Seconds(20);
// Less time than this left for the evaluation: not started (it could score next to nothing).
constexpr absl::Duration kEvalOnlyMinimum = absl::Seconds(30);

// --eval_only: the base checkpoint scored once on the held-out tasks, as a job's evaluations score
// a policy, and no job. Its curves.json names the weights it scored and how it scored them, so that
// `kernelrl seeds --rescored` can put it in place of the evaluation that scored those weights. The
// evaluation ends by `deadline` less a margin: cut there, it scores the tasks it finished, and
// curves.json records the cut (which `kernelrl seeds --rescored` refuses); the exit code is then 3.
int EvalOnly(const v1::LearnConfig& o, const std::string& hp, const Cluster& cluster, Console& console,
             absl::Time deadline) {
  const absl::Time until = deadline - kEvalMargin;
  if (until - absl::Now() < kEvalOnlyMinimum) {
    console.Line(absl::StrFormat("eval only: %.0f s left of --job_timeout_s=%g, under the %.0f s the evaluation needs "
                                 "at least beside the %.0f s kept to write curves.json: not started",
                                 absl::ToDoubleSeconds(deadline - absl::Now()), o.job_timeout_s(),
                                 absl::ToDoubleSeconds(kEvalOnlyMinimum), absl::ToDoubleSeconds(kEvalMargin)));
    return 1;
  }
  const std::string curves_dir = o.paths().run_dir() + "/learner-state/jobs/eval-only/curves";
  std::error_code ec;
  fs::create_directories(curves_dir, ec);
  if (ec) {
    console.Line("eval only: " + curves_dir + ": " + ec.message());
    return 1;
  }
  absl::StatusOr<Json> weights = WeightsDigest(o.base_checkpoint());
  if (!weights.ok()) {
    console.Line("eval only: the base's weights: " + std::string(weights.status().message()));
    return 1;
  }
  HeldOutEvaluator evals(o, cluster, console, curves_dir, Json::array());
  evals.Start("rescore", 0, 0, until);
  evals.Join();
  Json heldout = evals.Heldout();
  if (!heldout.is_array() || heldout.empty()) return 1;  // The console said why.
  std::string cut_line;
  if (const std::optional<actor::EvalCut> cut = actor::EvalCutOf(heldout[0]); cut.has_value()) {
    const Json* scored = FindJson(heldout[0], "n");
    const int k = scored != nullptr ? static_cast<int>(JsonNumber(*scored)) : 0;
    cut_line = absl::StrFormat(
        "eval only: cut at the %.0f s limit: %d of %d tasks scored; %d rollouts unfinished; curves.json records the "
        "cut and kernelrl seeds --rescored refuses it (a longer --job_timeout_s scores every task)",
        cut->wall_limit_s, k, k + static_cast<int>(cut->tasks_unfinished.size()), cut->rollouts_unfinished);
  }
  heldout[0]["weights"] = *weights;
  Json curves = CurvesHeader(o, hp, console, "", "EVAL_ONLY");
  curves["eval_temperature"] = o.eval_temperature();
  curves["eval_rollouts"] = o.eval_rollouts();
  curves["steps"] = Json::array();
  curves["heldout"] = std::move(heldout);
  curves["start_weights"] = *weights;
  curves["final_weights"] = *weights;
  const std::string path = curves_dir + "/curves.json";
  if (absl::Status s = WriteFileAtomically(path, DumpJson(curves, 1) + "\n"); !s.ok()) {
    console.Line("eval only: " + std::string(s.message()));
    return 1;
  }
  console.Line("eval only: " + path);
  if (!cut_line.empty()) {
    console.Line(cut_line);
    return 3;
  }
  return 0;
}

}  // namespace

int LearnMain(int argc, char** argv) {
  v1::LearnConfig o;
  CommandLine cl("learn", "The recipe on the task family as one job (tools/cli/learn_cmd.h, docs/LEARNING.md).", &o);
  cl.DefaultPreset(kLearnDefaultPreset);
  AddLearnFlags(cl);
  if (std::optional<int> code = cl.Parse(argc, argv, kLearnDefaults)) return *code;
  if (absl::Status s = ValidateLearnConfig(&o); !s.ok()) return cl.Fail(std::string(s.message()));
  if (absl::Status s = ResolvePaths("learn", o.mutable_paths()); !s.ok()) return cl.Fail(std::string(s.message()));
  if (o.plot_script().empty()) {
    for (const std::string& c : {o.paths().bin_dir() + "/tools/cli/learn_plots.py", o.paths().repo_dir() + "/tools/cli/learn_plots.py"}) {
      if (access(c.c_str(), R_OK) == 0) o.set_plot_script(c);
    }
  }
  absl::StatusOr<PausedRun> paused_run = o.resume() ? ReadPausedRun(o.paths().run_dir()) : PausedRun{};
  if (!paused_run.ok()) return cl.Fail("resume: " + std::string(paused_run.status().message()));
  Console console(o.paths().run_dir() + "/learn.log", paused_run->start);
  if (!paused_run->note.empty()) console.Line("resume: " + paused_run->note);
  Cluster cluster(o, cl.sets(), &console);
  if (!WriteFileAtomically(cluster.SkillPath(), o.skill_text()).ok()) return 1;

  // The job holds at agentic PPO's start until the PPO-start evaluation has run (StartPinned resumes it).
  o.mutable_job()->mutable_recipe()->mutable_agentic_ppo()->set_hold_at_start(!o.skip_ppo_start_eval());
  const std::string hp = TextProto(o.job());
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("learn-family-", o.ablation()));
  spec.set_base_checkpoint(o.base_checkpoint());
  spec.set_critic_checkpoint(o.critic_checkpoint());
  spec.set_task_set(o.family_dir() + "/train.jsonl");
  spec.set_rollouts_per_task(o.rollouts_per_task());
  spec.set_hyperparameters_text(hp);

  // The run's limit, the evaluation after the job included: the job is cut (or paused) early enough for it.
  const absl::Time deadline = absl::Now() + absl::Seconds(o.job_timeout_s());
  const absl::Time run_start = absl::FromUnixMillis(console.StartUnixMs());
  console.Line("run dir " + o.paths().run_dir() + ", backend " + o.backend() + ", ablation " + o.ablation());
  if (absl::Status started = StartServices(o, &cluster); !started.ok()) {
    console.Line("FAILED to start: " + std::string(started.message()));
    cluster.StopAll();
    return 1;
  }
  if (o.eval_only()) {
    const int code = EvalOnly(o, hp, cluster, console, deadline);
    cluster.StopAll();
    return code;
  }

  auto stub = v1::Learner::NewStub(grpc::CreateChannel(cluster.learner_, grpc::InsecureChannelCredentials()));
  v1::Job job;
  if (grpc::Status s = SubmitOrResume(stub.get(), o.resume() ? paused_run->job_id : "", spec, &job); !s.ok()) {
    console.Line((o.resume() ? "resume: " : "SubmitJob: ") + s.error_message());
    cluster.StopAll();
    return 1;
  }
  const std::string job_dir = absl::StrCat(o.paths().run_dir(), "/learner-state/jobs/", job.id());
  const std::string curves_dir = job_dir + "/curves";
  std::error_code ec;
  fs::create_directories(curves_dir, ec);
  console.Line(o.resume() ? absl::StrCat("job ", job.id(), " resumed at update ", job.step())
                         : absl::StrCat("job ", job.id(), " submitted: ", o.family_dir(), "/train.jsonl"));
  int train_tasks = 0;
  if (auto tasks = ReadFileToString(o.family_dir() + "/train.jsonl"); tasks.ok()) {
    train_tasks = static_cast<int>(std::count(tasks->begin(), tasks->end(), '\n'));
  }
  if (const std::string line = WarmupCoverage(o.job(), o.rollouts_per_task(), train_tasks); !o.resume() && !line.empty()) {
    console.Line(line);
  }

  HeldOutEvaluator evals(o, cluster, console, curves_dir, paused_run->heldout);
  // No evaluation runs past the limit: one that would is cut with the tasks it finished, its entry's
  // "cut" naming the rest (kernelrl seeds refuses a cut start or final that no re-scoring replaces).
  const absl::Time eval_until = deadline - kEvalMargin;

  // The start evaluation runs before any actor does: the job cannot update the policy without
  // trajectories, so every one of its rollouts is policy v0's, and it has the sandbox to itself.
  if (!o.resume() && !o.skip_start_eval()) {
    evals.Start("start", 0, 0, eval_until);
    evals.Join();
  }

  // Follow the job: switch actor pools by stage, show progress, trigger evaluations. The updates
  // themselves come from the ledger afterwards: a poll every 300 ms misses fast ones.
  int64_t last_eval_agentic = o.skip_ppo_start_eval() ? 0 : -1000;
  bool reached_agentic = false, evaluated_agentic = o.skip_ppo_start_eval(), paused = false;
  if (o.resume() && job.stage() == "agentic_ppo") {  // The pause evaluation stands for this sitting's first.
    evaluated_agentic = true;
    last_eval_agentic = job.stage_step();
  }
  // What follows a cut: the final (or pause) evaluation, unless --skip_final_eval (then nothing is held for it).
  const std::string after_cut = o.skip_final_eval() ? "" : "final evaluation";
  std::string last_line;
  StageProgress progress(o.job());
  absl::Time last_change = absl::Now();
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  int code = 1;
  int64_t polls = 0;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status s = stub->GetJob(&ctx, get, &job);
    const absl::Time now = absl::Now();
    const absl::Duration longest_eval = evals.LongestEval();
    const JobCut cut = CutForFinalEvaluation(deadline, o.skip_final_eval() ? absl::ZeroDuration() : longest_eval, now);
    const bool cut_now = now >= cut.at;
    if (s.ok()) {
      cluster.UsePool(PoolForStage(o, job.stage()), job.policy_version());
      const std::string line = absl::StrCat(v1::Job::State_Name(job.state()), " ", job.stage(), " step ",
                                            job.stage_step(), " (update ", job.step(), ", policy v",
                                            job.policy_version(), ")  ", job.message());
      for (const std::string& bar : progress.Update(job)) console.Line(bar);
      if (line != last_line || job.paused()) last_change = absl::Now();  // Paused (kernelrl job pause): not stalled.
      last_line = line;
      if (job.stage() == "agentic_ppo") {
        const int64_t k = job.stage_step();
        reached_agentic = true;
        if ((!evaluated_agentic || k - last_eval_agentic >= o.eval_every()) &&
            evals.StartPinned(absl::StrCat("agentic-", k), k, stub.get(), job.id(), eval_until)) {
          evaluated_agentic = true;
          last_eval_agentic = k;
        }
      }
      if (learner::rl::JobManager::Finished(job.state())) {
        console.Line(absl::StrCat("job ", v1::Job::State_Name(job.state()), job.message().empty() ? "" : ": ",
                                  job.message()));
        code = job.state() == v1::Job::SUCCEEDED ? 0 : 1;
        break;
      }
      const bool pause_at_cut = o.pause_at_timeout() && cut_now;
      paused = job.state() == v1::Job::RUNNING &&
               (pause_at_cut || (o.pause_after_agentic_steps() > 0 && job.stage() == "agentic_ppo" &&
                                 job.stage_step() >= o.pause_after_agentic_steps()));
      if (paused) {
        if (pause_at_cut) {
          console.Line(DescribeCut(cut, longest_eval, deadline, run_start, after_cut.empty() ? "" : "pause evaluation"));
        }
        console.Line("pausing: the services stop, the job stays RUNNING (kernelrl learn --resume --run_dir=" +
                     o.paths().run_dir() + " goes on)");
        evals.Join();  // A held-out evaluation running now resumes the job when it ends.
        auto held = PauseAndHold(stub.get(), job.id(), "kernelrl learn: the sitting is over; --resume goes on", &cluster);
        if (!held.ok()) {
          console.Line("pause failed: " + std::string(held.status().message()));
          break;
        }
        job = *held;
        if (job.state() != v1::Job::RUNNING) {  // Its last update was in progress: it ended instead.
          paused = false;
          code = job.state() == v1::Job::SUCCEEDED ? 0 : 1;
          break;
        }
        console.Line(absl::StrCat("held at update ", job.step(), " (policy v", job.policy_version(), ")"));
        code = 0;
        break;
      }
    }
    // A worker whose GPU health probe failed stays NOT_SERVING: when every worker is, no verdict
    // comes; say why now instead of after the stall timeout.
    if (++polls % 20 == 0 && std::all_of(cluster.sandboxes_.begin(), cluster.sandboxes_.end(),
                                         [](const std::string& a) { return Health(a) == "NOT_SERVING"; })) {
      console.Line("every sandbox worker is NOT_SERVING (their GPU health probes failed; see " + o.paths().run_dir() +
                   "/sandbox*.log): no verdict can come; cancelling");
      job = CancelAndWait(stub.get(), job);
      break;
    }
    if (cut_now) {
      console.Line(DescribeCut(cut, longest_eval, deadline, run_start, after_cut) + "; cancelling");
      job = CancelAndWait(stub.get(), job);
      break;
    }
    if (absl::Now() - last_change > absl::Seconds(o.stall_timeout_s())) {
      console.Line(absl::StrCat("job stalled: no change in ", o.stall_timeout_s(), " s; cancelling"));
      job = CancelAndWait(stub.get(), job);
      break;
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
  // The final evaluation (after any running one), with the last policy; also when the
  // job was cut by --job_timeout_s during agentic PPO (its state says CANCELLED). The job is over,
  // so its actors stop first, their rollouts in flight given 2 s and not the time to finish (no job
  // takes them now): beside the final evaluation they shared the policy server and the sandbox with
  // it and made it slower than the evaluations its reserve is measured by (on an H200 a final
  // evaluation beside them took 1.1-2.3x the PPO-start one, in 4 runs).
  cluster.StopActors(absl::Seconds(2));
  evals.Join();
  if (o.skip_final_eval()) {
    console.Line("no evaluation after the job (--skip_final_eval): a later job goes on from policy v" +
                 std::to_string(job.policy_version()));
  } else if (code == 0 || (reached_agentic && job.state() != v1::Job::FAILED)) {
    evals.Start(paused ? absl::StrCat("pause-", job.step()) : "final", job.policy_version(), job.stage_step(),
                eval_until);
    evals.Join();
  }
  cluster.StopAll();

  LearnRun run{&o, job, evals.Heldout(), train_tasks, 0, curves_dir, LatestPolicyCheckpoint(job_dir)};
  if (!WriteCurves(o, job, hp, job_dir, evals.Heldout(), console, run)) code = 1;
  run.seconds = console.Seconds();
  const std::string report = LearnReport(run);
  if (!WriteFileAtomically(curves_dir + "/report.txt", report).ok()) code = 1;
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  return code;
}

}  // namespace kernelrl::cli
