// Actor benchmark (a benchmark, not a test: it prints figures, it asserts
// nothing). `bazel run //tests/bench:actor_bench [-- flags]`.
//
// (a) Actor overhead per turn, excluding policy and sandbox time: the real
//     RolloutRunner with the scripted policy (instant: its replies are
//     canned) and an instant fake sandbox, one rollout at a time. Each call
//     into the policy and the sandbox is timed; a turn is the span from one
//     policy call to the next (the last one: to the end of Run), and its
//     overhead is that span minus the policy call and the sandbox calls
//     inside it: the loop's own work (trajectory bookkeeping, tokenizing
//     observations, tool-call parsing, the Read/Write tools' file work).
//     Baseline, same run: the bare loop over the same policy, parser and
//     ToolRunner without the trajectory builder (no token bookkeeping).
//     Goal: p50 < 5 ms.
// (b) --concurrent rollouts in one process (64 by default), each thread
//     running --per_thread rollouts: wall, turns/s, CPU seconds (getrusage)
//     and peak RSS (VmHWM, reset before the phase), with instant policy and
//     sandbox, then with simulated latency (--policy_ms per turn,
//     --sandbox_ms per evaluation). Baseline, same run: the same rollouts
//     one at a time.
//
// The scripted script makes no Bash call, so no contained shell is spawned
// (a Bash call's process start is tool time the agent asked for).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <cstring>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "actor/rollout.h"
#include "agent/policy/scripted_policy.h"
#include "actor/shell.h"
#include "actor/tools.h"
#include "actor/workspace.h"
#include "agent/chat/tool_calls.h"
#include "agent/chat/tools.h"
#include "common/file.h"

namespace kernelrl::actor {
namespace {

using Clock = std::chrono::steady_clock;
int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

struct Interval {
  int64_t begin, end;
};

std::string TrajectoryOf(const std::string& request_id) { return request_id.substr(0, request_id.find('/')); }

// Timed calls by key: "<trajectory id>" for policy calls, "<trajectory id>-sandbox" for evaluations.
class CallLog {
 public:
  void Add(const std::string& key, Interval i) {
    absl::MutexLock l(&mu_);
    calls_[key].push_back(i);
  }
  std::vector<Interval> Take(const std::string& trajectory_id) {
    absl::MutexLock l(&mu_);
    std::vector<Interval> v = std::move(calls_[trajectory_id]);
    calls_.erase(trajectory_id);
    return v;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<Interval>> calls_ ABSL_GUARDED_BY(mu_);
};

void Sleep(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

class TimedPolicy final : public agent::PolicyClient {
 public:
  TimedPolicy(agent::PolicyClient* inner, CallLog* log) : inner_(inner), log_(log) {}
  absl::StatusOr<agent::PolicyResponse> Generate(const agent::PolicyRequest& r) override {
    const int64_t t0 = NowNs();
    Sleep(latency_ms);
    absl::StatusOr<agent::PolicyResponse> out = inner_->Generate(r);
    log_->Add(TrajectoryOf(r.request_id), {t0, NowNs()});
    return out;
  }
  int latency_ms = 0;

 private:
  agent::PolicyClient* inner_;
  CallLog* log_;
};

// Instant sandbox: OK verdicts with random speed-ups.
class FakeSandbox final : public EvaluationClient {
 public:
  explicit FakeSandbox(CallLog* log) : log_(log) {}
  v1::Verdict Evaluate(const v1::EvaluateRequest& request) override {
    const int64_t t0 = NowNs();
    Sleep(latency_ms);
    v1::Verdict v;
    v.set_outcome(v1::Verdict::OK);
    double s;
    {
      absl::MutexLock l(&mu_);
      s = std::uniform_real_distribution<double>(0.5, 3.0)(rng_);
    }
    v.set_speedup_vs_eager(s * 1.3);
    v.set_speedup_vs_compile(s);
    v.set_reward(s > 1.05 ? 3 : 1);
    log_->Add(TrajectoryOf(request.request_id()) + "-sandbox", {t0, NowNs()});
    return v;
  }
  int latency_ms = 0;

 private:
  CallLog* log_;
  absl::Mutex mu_;
  std::mt19937 rng_{std::random_device{}()};
};

struct TurnFigures {
  std::vector<double> overhead_ms;  // Per turn.
  std::vector<double> setup_ms;     // Run start to the first policy call, per rollout.
  int turns = 0;
};

// Splits one rollout's [run_begin, run_end] into turns at the policy calls.
void Account(const std::vector<Interval>& policy, std::vector<Interval> sandbox, Interval run, TurnFigures* f) {
  if (policy.empty()) return;
  f->setup_ms.push_back((policy[0].begin - run.begin) / 1e6);
  for (size_t k = 0; k < policy.size(); ++k) {
    const int64_t begin = policy[k].begin, end = k + 1 < policy.size() ? policy[k + 1].begin : run.end;
    int64_t excluded = policy[k].end - policy[k].begin;
    for (const Interval& s : sandbox) {
      if (s.begin >= begin && s.end <= end) excluded += s.end - s.begin;
    }
    f->overhead_ms.push_back((end - begin - excluded) / 1e6);
    ++f->turns;
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

// kB from /proc/self/status ("VmHWM" peak, "VmRSS" now).
long ProcKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + std::strlen(key) + 1, nullptr, 10);
  }
  return -1;
}

void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Env {
  std::unique_ptr<agent::Tokenizer> tokenizer;
  std::optional<agent::ChatFormat> with_tools, plain;
  std::vector<v1::Task> tasks;
  std::string skill, solutions, root;
  CallLog log;
};

struct Flags {
  int rollouts_a = 60;
  int concurrent = 64;
  int per_thread = 2;
  int policy_ms = 30;
  int sandbox_ms = 100;
  std::string tokenizer;
};

v1::RolloutConfig Config(const std::string& root) {
  v1::RolloutConfig c;
  c.set_max_turns(150);
  c.set_eval_max_turns(200);
  c.set_context_tokens(131072);
  c.set_wall_seconds(600);
  c.set_max_new_tokens_per_turn(8192);
  c.set_temperature(1.0f);
  c.set_top_p(1.0f);
  c.set_workspace_root(root);
  c.set_final_evaluation(true);
  v1::ToolLimits* t = c.mutable_tools();
  t->set_bash_default_timeout_s(60);
  t->set_bash_max_timeout_s(600);
  t->set_output_cap_bytes(16000);
  t->set_read_max_lines(2000);
  t->set_max_file_bytes(1 << 20);
  t->set_max_background_jobs(2);
  c.mutable_isolation()->set_contain(true);
  return c;
}

// (a) The real loop, one rollout at a time.
TurnFigures ActorTurns(Env* env, agent::PolicyClient* policy, EvaluationClient* sandbox, int rollouts, const std::string& tag) {
  RolloutRunner runner({policy, sandbox, env->tokenizer.get(), &*env->with_tools, &*env->plain}, Config(env->root),
                       env->skill);
  TurnFigures f;
  for (int i = 0; i < rollouts; ++i) {
    RolloutOptions o;
    o.trajectory_id = absl::StrCat(tag, i);
    const int64_t t0 = NowNs();
    absl::StatusOr<RolloutResult> r = runner.Run(env->tasks[i % env->tasks.size()], o);
    const int64_t t1 = NowNs();
    if (!r.ok() || r->trajectory.stats().stop_reason() != "submitted") {
      std::fprintf(stderr, "rollout failed: %s %s\n", r.ok() ? r->trajectory.stats().stop_reason().c_str() : "",
                   r.ok() ? r->error.c_str() : r.status().ToString().c_str());
      std::exit(1);
    }
    Account(env->log.Take(o.trajectory_id), env->log.Take(o.trajectory_id + "-sandbox"), {t0, t1}, &f);
  }
  return f;
}

// (a) baseline: the bare policy + parser + tools loop, no trajectory builder.
TurnFigures BareTurns(Env* env, agent::PolicyClient* policy, EvaluationClient* sandbox, int rollouts, const std::string& tag) {
  const v1::RolloutConfig config = Config(env->root);
  TurnFigures f;
  for (int i = 0; i < rollouts; ++i) {
    const v1::Task& task = env->tasks[i % env->tasks.size()];
    const std::string id = absl::StrCat(tag, i);
    const int64_t t0 = NowNs();
    {
      auto ws = RolloutWorkspace::Create(config.workspace_root(), task.reference_source(), env->skill);
      if (!ws.ok()) std::exit(1);
      ShellSession shell((*ws)->dir(), (*ws)->control_dir(), {}, config.isolation(), 16000);
      ToolRunner tools(ws->get(), &shell, sandbox, &task, config.tools(), id);
      const std::vector<int32_t> prompt = {1, 2, 3};
      for (int turn = 0;; ++turn) {
        agent::PolicyRequest req;
        req.prompt_ids = prompt;
        req.max_new_tokens = 8192;
        req.task_id = task.id();
        req.turn = turn;
        req.request_id = absl::StrCat(id, "/turn-", turn);
        absl::StatusOr<agent::PolicyResponse> r = policy->Generate(req);
        if (!r.ok()) std::exit(1);
        std::vector<int32_t> ids = r->ids;
        if (!ids.empty() && ids.back() == env->plain->im_end_id()) ids.pop_back();
        absl::StatusOr<std::vector<agent::ToolCall>> calls = agent::ParseToolCalls(env->tokenizer->Decode(ids));
        if (!calls.ok() || calls->empty()) break;
        for (const agent::ToolCall& c : *calls) tools.Run(c.name, c.arguments);
      }
    }
    // Sandbox calls carry the ToolRunner prefix (the id).
    Account(env->log.Take(id), env->log.Take(id + "-sandbox"), {t0, NowNs()}, &f);
  }
  return f;
}

struct Throughput {
  double wall = 0, cpu = 0;
  int turns = 0, rollouts = 0;
  long peak_kb = 0;
};

Throughput Concurrent(Env* env, agent::PolicyClient* policy, EvaluationClient* sandbox, int threads, int per_thread,
                      const std::string& tag) {
  RolloutRunner runner({policy, sandbox, env->tokenizer.get(), &*env->with_tools, &*env->plain}, Config(env->root),
                       env->skill);
  std::atomic<int> turns{0}, failed{0};
  ResetPeakRss();
  const double cpu0 = CpuSeconds();
  const int64_t t0 = NowNs();
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < per_thread; ++i) {
        RolloutOptions o;
        o.trajectory_id = absl::StrCat(tag, w, "-", i);
        absl::StatusOr<RolloutResult> r = runner.Run(env->tasks[(w + i) % env->tasks.size()], o);
        env->log.Take(o.trajectory_id);
        env->log.Take(o.trajectory_id + "-sandbox");
        if (!r.ok() || r->trajectory.stats().stop_reason() != "submitted") {
          ++failed;
          continue;
        }
        int assistant = 0;
        for (const v1::Turn& t : r->trajectory.turns()) assistant += t.role() == v1::Turn::ASSISTANT;
        turns += assistant;
      }
    });
  }
  for (auto& t : workers) t.join();
  Throughput out;
  out.wall = (NowNs() - t0) / 1e9;
  out.cpu = CpuSeconds() - cpu0;
  out.turns = turns;
  out.rollouts = threads * per_thread - failed;
  out.peak_kb = ProcKb("VmHWM:");
  if (failed > 0) std::fprintf(stderr, "%d rollouts failed\n", failed.load());
  return out;
}

void PrintThroughput(const char* name, const Throughput& t) {
  std::printf("  %-34s wall %6.2f s  turns/s %7.1f  CPU %6.2f s (%.2f ms/turn)  peak RSS %6.1f MB  rollouts %d\n", name,
              t.wall, t.turns / t.wall, t.cpu, 1e3 * t.cpu / std::max(1, t.turns), t.peak_kb / 1024.0, t.rollouts);
}

int Main(const Flags& flags) {
  Env env;
  const char* tmp = std::getenv("TMPDIR");
  env.root = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/actor_bench.", getpid());
  std::filesystem::create_directories(env.root + "/rollouts");
  std::string tok_path = flags.tokenizer;
  if (tok_path.empty()) {  // The small ChatML tokenizer the tests use, trained here.
    tok_path = env.root + "/tok/tokenizer.json";
    const std::string cmd = absl::StrCat("python3 agent/tokenizer/testdata/make_tokenizer_fixtures.py '", env.root,
                                         "/tok' chat > '", env.root, "/tok.log' 2>&1");
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "tokenizer fixture failed (%s/tok.log); or pass --tokenizer=PATH\n", env.root.c_str());
      return 1;
    }
  }
  auto tok = agent::Tokenizer::Load(tok_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  env.tokenizer = *std::move(tok);
  env.with_tools.emplace(*agent::ChatFormat::Create(env.tokenizer.get(), agent::ToolSchemas()));
  env.plain.emplace(*agent::ChatFormat::Create(env.tokenizer.get(), Json::array()));
  env.skill = ReadFileToString("sandbox/SKILL.md").value_or("");
  env.solutions = "sandbox/solutions/cpu";
  for (const auto& e : std::filesystem::directory_iterator("sandbox/testdata/cpu_tasks")) {
    const std::string name = e.path().stem().string();
    if (e.path().extension() != ".py" || !std::filesystem::is_directory(env.solutions + "/" + name)) continue;
    v1::Task t;
    t.set_id(name);
    t.set_reference_source(ReadFileToString(e.path().string()).value_or(""));
    env.tasks.push_back(t);
  }
  if (env.tasks.empty() || env.skill.empty()) {
    std::fprintf(stderr, "run from the runfiles tree (bazel run //tests/bench:actor_bench)\n");
    return 1;
  }
  env.root += "/rollouts";

  agent::ScriptedPolicy scripted(env.solutions, 1, env.tokenizer.get(), env.plain->im_end_id());
  TimedPolicy policy(&scripted, &env.log);
  FakeSandbox sandbox(&env.log);
  std::printf("actor_bench: %zu CPU tasks, scripted policy (6 turns: Read, Write, Compile, Verify, Profile, done), "
              "%u cores\n", env.tasks.size(), std::thread::hardware_concurrency());
  ActorTurns(&env, &policy, &sandbox, 3, "warm");  // Page cache, tokenizer piece cache.
  BareTurns(&env, &policy, &sandbox, 3, "warmb");

  // (a) Interleaved in blocks so background load hits both alike.
  TurnFigures actor, bare;
  for (int block = 0; block < 4; ++block) {
    const int n = flags.rollouts_a / 4;
    TurnFigures a = ActorTurns(&env, &policy, &sandbox, n, absl::StrCat("a", block, "-"));
    TurnFigures b = BareTurns(&env, &policy, &sandbox, n, absl::StrCat("b", block, "-"));
    actor.overhead_ms.insert(actor.overhead_ms.end(), a.overhead_ms.begin(), a.overhead_ms.end());
    actor.setup_ms.insert(actor.setup_ms.end(), a.setup_ms.begin(), a.setup_ms.end());
    bare.overhead_ms.insert(bare.overhead_ms.end(), b.overhead_ms.begin(), b.overhead_ms.end());
    bare.setup_ms.insert(bare.setup_ms.end(), b.setup_ms.begin(), b.setup_ms.end());
  }
  const double a50 = Percentile(actor.overhead_ms, 0.5), a90 = Percentile(actor.overhead_ms, 0.9);
  const double b50 = Percentile(bare.overhead_ms, 0.5), b90 = Percentile(bare.overhead_ms, 0.9);
  std::printf("(a) overhead per turn, policy and sandbox time excluded (%zu turns each):\n", actor.overhead_ms.size());
  std::printf("  actor loop (RolloutRunner)   p50 %6.3f ms  p90 %6.3f ms  max %6.3f ms  setup/rollout p50 %.3f ms\n", a50,
              a90, Percentile(actor.overhead_ms, 1.0), Percentile(actor.setup_ms, 0.5));
  std::printf("  baseline bare loop           p50 %6.3f ms  p90 %6.3f ms  max %6.3f ms  setup/rollout p50 %.3f ms\n", b50,
              b90, Percentile(bare.overhead_ms, 1.0), Percentile(bare.setup_ms, 0.5));
  auto amortized = [](const TurnFigures& f) {
    double sum = 0;
    for (double x : f.overhead_ms) sum += x;
    for (double x : f.setup_ms) sum += x;
    return sum / std::max<size_t>(1, f.overhead_ms.size());
  };
  std::printf("  amortized incl. setup        actor %.3f ms/turn, bare %.3f ms/turn\n", amortized(actor), amortized(bare));
  std::printf("  ratio actor/bare             p50 %.2fx  p90 %.2fx;  goal p50 < 5 ms: %s (%.1f%% of it)\n",
              a50 / std::max(1e-9, b50), a90 / std::max(1e-9, b90), a50 < 5.0 ? "MET" : "NOT MET", 100 * a50 / 5.0);

  // (b) Concurrency.
  std::printf("(b) %d concurrent rollouts x %d each in one process (baseline: the same one at a time):\n",
              flags.concurrent, flags.per_thread);
  std::printf("  RSS before: %.1f MB\n", ProcKb("VmRSS:") / 1024.0);
  const int seq_threads = std::max(1, flags.concurrent / 4);
  Throughput seq = Concurrent(&env, &policy, &sandbox, 1, seq_threads, "s-");
  Throughput conc = Concurrent(&env, &policy, &sandbox, flags.concurrent, flags.per_thread, "c-");
  PrintThroughput("sequential, instant", seq);
  PrintThroughput("concurrent, instant", conc);
  std::printf("  ratio concurrent/sequential: turns/s %.2fx, CPU per turn %.2fx\n",
              (conc.turns / conc.wall) / std::max(1e-9, seq.turns / seq.wall),
              (conc.cpu / std::max(1, conc.turns)) / std::max(1e-9, seq.cpu / std::max(1, seq.turns)));
  policy.latency_ms = flags.policy_ms;
  sandbox.latency_ms = flags.sandbox_ms;
  Throughput seq_l = Concurrent(&env, &policy, &sandbox, 1, 2, "sl-");
  Throughput conc_l = Concurrent(&env, &policy, &sandbox, flags.concurrent, flags.per_thread, "cl-");
  const std::string lat = absl::StrCat("policy ", flags.policy_ms, " ms, sandbox ", flags.sandbox_ms, " ms");
  PrintThroughput(("sequential, " + lat).c_str(), seq_l);
  PrintThroughput(("concurrent, " + lat).c_str(), conc_l);
  std::printf("  ratio concurrent/sequential: turns/s %.2fx (ideal %dx), CPU per turn %.2fx\n",
              (conc_l.turns / conc_l.wall) / std::max(1e-9, seq_l.turns / seq_l.wall), flags.concurrent,
              (conc_l.cpu / std::max(1, conc_l.turns)) / std::max(1e-9, seq_l.cpu / std::max(1, seq_l.turns)));
  std::error_code ec;
  std::filesystem::remove_all(env.root.substr(0, env.root.rfind('/')), ec);
  return 0;
}

}  // namespace
}  // namespace kernelrl::actor

int main(int argc, char** argv) {
  kernelrl::actor::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
    int* target = key == "--rollouts_a"   ? &flags.rollouts_a
                  : key == "--concurrent" ? &flags.concurrent
                  : key == "--per_thread" ? &flags.per_thread
                  : key == "--policy_ms"  ? &flags.policy_ms
                  : key == "--sandbox_ms" ? &flags.sandbox_ms
                                          : nullptr;
    if (key == "--tokenizer") {
      flags.tokenizer = value;
    } else if (target == nullptr || !absl::SimpleAtoi(value, target)) {
      std::fprintf(stderr,
                   "usage: actor_bench [--rollouts_a=N] [--concurrent=N] [--per_thread=N] [--policy_ms=N] "
                   "[--sandbox_ms=N] [--tokenizer=PATH]\n");
      return 2;
    }
  }
  return kernelrl::actor::Main(flags);
}
