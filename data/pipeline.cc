#include "data/pipeline.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "common/file.h"
#include "agent/policy/policy_factory.h"
#include "common/log.h"
#include "data/catalogue.h"
#include "data/filters.h"
#include "data/report.h"
#include "google/protobuf/text_format.h"
#include "profiler_service/judge.h"
#include "profiler_service/profiler_defaults.h"

namespace kernelrl {
namespace {

namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::Status WriteFile(const std::string& path, const std::string& text) { return WriteFileAtomically(path, text); }

}  // namespace

absl::StatusOr<DataConfig> WithDataDefaults(DataConfig c) {
  if (c.out_dir().empty()) return absl::InvalidArgumentError("out_dir is required");
  if (c.python().empty()) c.set_python("python3");
  if (c.harness_root().empty()) c.set_harness_root(".");
  std::error_code ec;
  c.set_harness_root(fs::absolute(c.harness_root(), ec).lexically_normal().string());
  c.set_out_dir(fs::absolute(c.out_dir(), ec).lexically_normal().string());
  if (c.ops_file().empty()) c.set_ops_file("data/ops.textproto");
  if (fs::path(c.ops_file()).is_relative()) c.set_ops_file((fs::path(c.harness_root()) / c.ops_file()).string());
  if (!c.kernelbench_root().empty())
    c.set_kernelbench_root(fs::absolute(c.kernelbench_root(), ec).lexically_normal().string());
  if (c.kernelbench_levels().empty())
    for (const char* l : {"level1", "level2", "level3"}) c.add_kernelbench_levels(l);
  if (c.target_accepted() <= 0) return absl::InvalidArgumentError("target_accepted must be > 0");
  if (c.max_candidates() <= 0) c.set_max_candidates(std::max(1000, 20 * c.target_accepted()));
  if (c.workers() <= 0) c.set_workers(1);
  if (c.worker_threads() <= 0)
    c.set_worker_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / c.workers()));
  if (c.progress_every_s() <= 0) c.set_progress_every_s(10);
  if (c.request_timeout_s() <= 0) c.set_request_timeout_s(120);
  auto* t = c.mutable_target();
  if (t->device().empty()) t->set_device("cpu");
  if (t->device() != "cpu" && t->device() != "cuda") return absl::InvalidArgumentError("target.device: cpu or cuda");
  if (t->bandwidth_gbps() <= 0) t->set_bandwidth_gbps(t->device() == "cuda" ? 2500 : 10);
  if (t->gflops() <= 0) t->set_gflops(t->device() == "cuda" ? 40000 : 100);
  auto* s = c.mutable_sampler();
  if (s->op_count_weights().empty())  // CUDA-Agent-Ops-6K's shares (Table 3 of the paper).
    for (double w : {3.40, 83.77, 7.62, 2.80, 1.23}) s->add_op_count_weights(w);
  if (s->min_target_ms() <= 0) s->set_min_target_ms(2);
  if (s->max_target_ms() <= 0) s->set_max_target_ms(20);
  if (s->max_tensor_bytes() <= 0) s->set_max_tensor_bytes(1LL << 30);
  *c.mutable_filters() = WithFilterDefaults(c.filters());
  auto* d = c.mutable_decontamination();
  if (d->max_similarity() <= 0) d->set_max_similarity(0.9);
  if (d->histogram_bins() <= 0) d->set_histogram_bins(20);
  if (c.composer().empty()) c.set_composer("rule");
  if (c.composer() != "rule" && c.composer() != "llm") return absl::InvalidArgumentError("composer: rule or llm");
  return c;
}

Pipeline::Pipeline(DataConfig config) : config_(std::move(config)) {
  state_dir_ = (fs::path(config_.out_dir()) / "state").string();
}

absl::StatusOr<OpCatalogue> Pipeline::LoadOrCrawl(WorkerPool& pool) {
  const std::string path = (fs::path(state_dir_) / "catalogue.txtpb").string();
  if (auto text = ReadFileToString(path); text.ok()) {
    OpCatalogue cat;
    if (!google::protobuf::TextFormat::ParseFromString(*text, &cat))
      return absl::DataLossError(absl::StrCat(path, " is corrupt; remove it to crawl again"));
    std::cout << "crawl: reusing " << path << " (" << cat.ops_size() << " operators, " << cat.transformers_size()
              << " transformers modules)\n";
    return cat;
  }
  auto rules = LoadOpRules(config_.ops_file());
  if (!rules.ok()) return rules.status();
  PythonWorker* first = nullptr;
  absl::StatusOr<Inventory> inv = absl::InternalError("no worker");
  pool.OnEach([&](PythonWorker& w, int i) {
    if (i != 0) return;
    first = &w;
    std::vector<std::string> fams(config_.transformers_families().begin(), config_.transformers_families().end());
    inv = RequestInventory(w, fams, std::max(300.0, config_.request_timeout_s()));
  });
  if (!inv.ok()) return absl::Status(inv.status().code(), absl::StrCat("inventory: ", inv.status().message()));
  const std::string crawl_dir = (fs::path(state_dir_) / "crawl").string();
  fs::create_directories(crawl_dir);
  CrawlProbe probe = [&](PythonWorker& w, const std::string& name, const std::string& source) {
    const std::string file = (fs::path(crawl_dir) / (name + ".py")).string();
    if (auto st = WriteFile(file, source); !st.ok()) return absl::StatusOr<ProbeFacts>(st);
    ProbeOptions o;
    o.device = "cpu";
    return RequestProbe(w, file, o, std::max(120.0, config_.request_timeout_s()));
  };
  const double t0 = Now();
  auto cat = Crawl(*rules, *inv, pool, probe, config_.seed());
  if (!cat.ok()) return cat.status();
  std::cout << absl::StrFormat(
      "crawl: torch %s: %d nn modules, %d functional; %d of %d operator rules hold, %d transformers modules "
      "(transformers %s); %d excluded; %.1f s\n",
      cat->torch_version(), cat->nn_modules_in_torch(), cat->functional_in_torch(), cat->ops_size(),
      rules->op_size(), cat->transformers_size(),
      cat->transformers_version().empty() ? "not installed" : cat->transformers_version(), cat->excluded_size(),
      Now() - t0);
  std::string text;
  google::protobuf::TextFormat::PrintToString(*cat, &text);
  if (auto st = WriteFile(path, text); !st.ok()) return st;
  return cat;
}

absl::Status Pipeline::LoadReferences(WorkerPool& pool) {
  std::vector<std::pair<std::string, std::string>> files;  // (name, path)
  if (config_.kernelbench_root().empty()) {
    std::cout << "decontamination: no kernelbench_root, skipped\n";
    return absl::OkStatus();
  }
  for (const auto& level : config_.kernelbench_levels()) {
    const fs::path dir = fs::path(config_.kernelbench_root()) / level;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".py") files.emplace_back(level + "/" + e.path().stem().string(), e.path().string());
  }
  if (files.empty())
    return absl::NotFoundError(absl::StrCat("no KernelBench programs under ", config_.kernelbench_root()));
  std::sort(files.begin(), files.end());
  std::vector<absl::StatusOr<AstFingerprint>> prints(files.size(), absl::InternalError("not run"));
  pool.ForEach(files.size(), [&](PythonWorker& w, int64_t i) {
    auto dump = RequestAst(w, files[i].second, config_.request_timeout_s());
    prints[i] = dump.ok() ? Fingerprint(*dump) : absl::StatusOr<AstFingerprint>(dump.status());
  });
  int skipped = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (prints[i].ok()) {
      references_.Add(files[i].first, *std::move(prints[i]));
    } else {
      ++skipped;
      KLOG(WARNING) << "decontamination: " << files[i].first << ": " << prints[i].status();
    }
  }
  std::cout << "decontamination: " << references_.size() << " KernelBench programs from "
            << config_.kernelbench_root() << (skipped ? absl::StrCat(" (", skipped, " unparsable)") : "") << "\n";
  return absl::OkStatus();
}

void Pipeline::Restore(const std::vector<CandidateRecord>& records) {
  absl::MutexLock l(&mu_);
  for (const auto& r : records) {
    done_.insert(r.index());
    if (r.verdict() == "accepted") {
      ++accepted_;
      hashes_[r.ast_hash()] = true;
    } else {
      rejected_[r.verdict()]++;
    }
  }
}

int64_t Pipeline::Claim() {
  absl::MutexLock l(&mu_);
  const double deadline = config_.deadline_s() > 0 ? started_ + config_.deadline_s() : 0;
  if (stop_ || accepted_ >= config_.target_accepted() || (deadline > 0 && Now() > deadline)) return -1;
  while (done_.count(next_)) ++next_;
  if (next_ >= config_.max_candidates()) return -1;
  ++in_flight_;
  return next_++;
}

void Pipeline::Finish(const CandidateRecord& r) {
  const auto st = journal_->Append(r);
  if (!st.ok()) {
    KLOG(ERROR) << "journal: " << st << "; stopping";
    stop_ = true;
  }
  absl::MutexLock l(&mu_);
  --in_flight_;
  done_.insert(r.index());
  ++run_done_;
  if (r.verdict() == "accepted") {
    ++accepted_;
    ++run_accepted_;
  } else {
    rejected_[r.verdict()]++;
  }
}

bool Pipeline::ClaimHash(const std::string& hash) {
  absl::MutexLock l(&mu_);
  return hashes_.emplace(hash, false).second;
}

void Pipeline::ReleaseHash(const std::string& hash) {
  absl::MutexLock l(&mu_);
  const auto it = hashes_.find(hash);
  if (it != hashes_.end() && !it->second) hashes_.erase(it);
}

std::optional<Rejection> Pipeline::Execute(PythonWorker& w, const ComposedTask& task, const std::string& path,
                                           int64_t memory_limit_bytes, CandidateRecord* rec) {
  const FilterConfig& fc = config_.filters();
  const double timeout = config_.request_timeout_s();
  ProbeOptions po;
  po.device = config_.target().device();
  po.compile_backend = fc.compile_backend();
  po.atol = fc.atol();
  po.rtol = fc.rtol();
  po.lock_path = (fs::path(state_dir_) / "gpu.lock").string();
  po.memory_limit_bytes = memory_limit_bytes;
  po.defer_compile = !po.compile_backend.empty();  // Compiled only if the eager rules keep it.
  const double probe_t0 = Now();
  auto add_probe_time = [&] { rec->set_probe_seconds(rec->probe_seconds() + Now() - probe_t0); };
  auto facts = RequestProbe(w, path, po, timeout);
  if (!facts.ok()) {
    add_probe_time();
    return Rejection{"eager", absl::StrCat("worker: ", facts.status().message())};
  }
  std::optional<Rejection> r = JudgeEager(*facts, fc);
  if (po.defer_compile && facts->error_stage().empty()) {
    auto compiled = RequestCompile(w, path, /*drop=*/r.has_value(), timeout);
    if (!compiled.ok() && !r) r = Rejection{"compile", absl::StrCat("worker: ", compiled.status().message())};
    if (compiled.ok() && !r) {
      facts->set_compile_max_abs_diff(compiled->compile_max_abs_diff());
      facts->set_compile_s(compiled->compile_s());
      facts->set_peak_bytes(std::max(facts->peak_bytes(), compiled->peak_bytes()));
      if (!compiled->error_stage().empty()) {
        facts->set_error_stage(compiled->error_stage());
        facts->set_error(compiled->error());
      }
    }
  }
  if (!r) r = JudgeCompile(*facts, fc);
  add_probe_time();
  *rec->mutable_facts() = *facts;
  if (r) return r;

  TimingOptions to;
  to.device = po.device;
  to.budget_s = fc.timing_budget_s();
  to.min_samples = fc.timing_min_samples();
  to.max_samples = fc.timing_max_samples();
  to.lock_path = po.lock_path;
  to.memory_limit_bytes = memory_limit_bytes;
  const double timing_t0 = Now();
  auto bm = RequestTiming(w, task.id, path, to, timeout, rec->mutable_timing());
  rec->set_timing_seconds(rec->timing_seconds() + Now() - timing_t0);
  if (!bm.ok()) return Rejection{"timing", std::string(bm.status().message())};
  static const ProfilerConfig* profiler = new ProfilerConfig(WithProfilerDefaults(ProfilerConfig()));
  Baseline b = BuildBaseline(*bm, *profiler);
  if (b.error().empty() && !bm->error().empty()) b.set_error(bm->error());
  if (b.error().empty() && !bm->eager().error().empty()) b.set_error(bm->eager().error());
  rec->set_eager_us(b.eager().median_us());
  rec->set_eager_rse(b.eager().rel_std_error());
  rec->set_eager_samples(b.eager().samples());
  rec->set_gpu_model(bm->device().gpu_model());
  if (b.error().rfind("oom", 0) == 0 || absl::StrContains(b.error(), "OutOfMemoryError"))
    return Rejection{"oom", b.error()};
  return JudgeRuntime(b, fc);
}

CandidateRecord Pipeline::RunCandidate(PythonWorker& w, int64_t index) {
  const double t0 = Now();
  CandidateRecord rec;
  rec.set_index(index);
  auto reject = [&](const std::string& filter, const std::string& detail) {
    rec.set_verdict(filter);
    rec.set_detail(detail.substr(0, 600));
    rec.set_seconds(Now() - t0);
    return rec;
  };
  // An LLM's answer that is no task (or a failed request) is its own verdict; after that it is judged like any.
  const std::string compose_verdict = llm_composer_ ? "llm" : "compose";
  if (llm_composer_) rec.set_composer("llm");
  auto task = llm_composer_ ? llm_composer_->Compose(index) : composer_->Compose(index);
  if (!task.ok()) return reject(compose_verdict, std::string(task.status().message()));
  rec.set_id(task->id);
  for (const auto& op : task->operators) rec.add_operators(op);
  rec.set_transformers(task->transformers);
  rec.set_composer(task->composer);
  rec.set_estimated_ms(task->estimated_ms);
  rec.set_estimated_peak_bytes(task->estimated_peak_bytes);
  for (int64_t d : task->input_shape) rec.add_input_shape(d);
  const std::string path = (fs::path(state_dir_) / "tasks" / (task->id + ".py")).string();
  if (auto st = WriteFile(path, task->source); !st.ok()) return reject("compose", std::string(st.message()));

  auto dump = RequestAst(w, path, config_.request_timeout_s());
  auto fp = dump.ok() ? Fingerprint(*dump) : absl::StatusOr<AstFingerprint>(dump.status());
  if (!fp.ok()) return reject(task->composer == "llm" ? "llm" : "compose", absl::StrCat("ast: ", fp.status().message()));
  rec.set_ast_hash(HashText(fp->root));
  if (config_.decontamination().dedup() && !ClaimHash(rec.ast_hash()))
    return reject("duplicate", "normalised AST seen before");
  const Nearest near = references_.Closest(*fp);
  rec.set_max_similarity(near.similarity);
  rec.set_most_similar(near.name);
  const FilterConfig& fc = config_.filters();
  auto fail = [&](const std::string& filter, const std::string& detail) {
    ReleaseHash(rec.ast_hash());
    return reject(filter, detail);
  };
  if (near.similarity > config_.decontamination().max_similarity())
    return fail("contaminated", absl::StrFormat("similarity %.3f to %s", near.similarity, near.name));

  // Within a memory grant; out of memory, again with a larger one, so only a
  // task that does not fit the whole budget (alone on the device) is "oom".
  std::optional<Rejection> verdict;
  for (int attempt = 0;; ++attempt) {
    const double wait_t0 = Now();
    MemoryBudget::Grant grant = budget_->Acquire(budget_->UnitsForAttempt(attempt, fc.oom_retries()));
    rec.set_grant_wait_seconds(rec.grant_wait_seconds() + Now() - wait_t0);
    rec.set_attempt(attempt);
    rec.set_memory_units(grant.units());
    verdict = Execute(w, *task, path, grant.bytes(), &rec);
    if (!verdict || verdict->filter != "oom" || grant.units() >= budget_->total_units()) break;
  }
  if (verdict) return fail(verdict->filter, verdict->detail);

  {
    absl::MutexLock l(&mu_);
    hashes_[rec.ast_hash()] = true;
  }
  rec.set_source(task->source);
  rec.set_verdict("accepted");
  rec.set_seconds(Now() - t0);
  return rec;
}

void Pipeline::Progress(bool final) {
  absl::MutexLock l(&mu_);
  const double dt = std::max(1e-3, Now() - started_);
  std::vector<std::string> rej;
  for (const auto& f : FilterOrder()) {
    const auto it = rejected_.find(f);
    if (it != rejected_.end()) rej.push_back(absl::StrCat(f, " ", it->second));
  }
  std::cout << absl::StrFormat(
                   "%s[%6.0fs] candidates %d (+%d running), accepted %d/%d; this run %.1f candidates/min, "
                   "%.1f accepted/min; rejected: %s\n",
                   final ? "done " : "", dt, done_.size(), in_flight_, accepted_, config_.target_accepted(),
                   60.0 * run_done_ / dt, 60.0 * run_accepted_ / dt, rej.empty() ? "none" : absl::StrJoin(rej, ", "))
            << std::flush;
}

absl::Status Pipeline::Run() {
  started_ = Now();
  std::error_code ec;
  fs::create_directories(fs::path(state_dir_) / "tasks", ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", state_dir_, ": ", ec.message()));
  // A state directory belongs to one seed: resuming with another would mix two runs.
  const std::string seed_file = (fs::path(state_dir_) / "seed").string();
  const std::string seed_text = absl::StrCat(config_.seed(), "\n");
  if (auto prev = ReadFileToString(seed_file); prev.ok() && *prev != seed_text) {
    return absl::FailedPreconditionError(absl::StrCat(state_dir_, " holds a run with seed ", *prev,
                                                      "; use another out_dir"));
  } else if (!prev.ok()) {
    if (auto st = WriteFile(seed_file, seed_text); !st.ok()) return st;
  }
  PythonWorker::Options wo;
  wo.python = config_.python();
  wo.harness_root = config_.harness_root();
  wo.threads = config_.worker_threads();
  wo.log_path = (fs::path(state_dir_) / "worker.log").string();
  WorkerPool pool(wo, config_.workers());
  budget_ = std::make_unique<MemoryBudget>(config_.workers(), config_.target().memory_budget_bytes());

  auto cat = LoadOrCrawl(pool);
  if (!cat.ok()) return cat.status();
  composer_ = std::make_unique<Composer>(*cat, config_.sampler(), config_.target(), config_.seed(),
                                         config_.id_prefix());
  if (config_.composer() == "llm") {
    if (!policy_) {
      auto tok = agent::Tokenizer::Load(config_.llm().tokenizer_json());
      if (!tok.ok()) return absl::InvalidArgumentError(absl::StrCat("llm.tokenizer_json: ", tok.status().message()));
      auto client = agent::MakePolicyClient(config_.llm().policy(), tok->get(), (*tok)->TokenId("<|im_end|>"));
      if (!client.ok()) return absl::InvalidArgumentError(absl::StrCat("llm.policy: ", client.status().message()));
      SetPolicy(*std::move(client), *std::move(tok));
    }
    auto llm = LlmComposer::Create(composer_.get(), std::move(policy_), std::move(tokenizer_), config_.llm(),
                                   config_.seed(), config_.id_prefix());
    if (!llm.ok()) return llm.status();
    llm_composer_ = *std::move(llm);
  }
  if (auto st = LoadReferences(pool); !st.ok()) return st;

  std::vector<CandidateRecord> existing;
  auto journal = Journal::Open((fs::path(state_dir_) / "journal.jsonl").string(), &existing);
  if (!journal.ok()) return journal.status();
  journal_ = *std::move(journal);
  Restore(existing);
  if (!existing.empty()) std::cout << "resume: " << existing.size() << " candidates already decided\n";

  std::atomic<bool> running{true};
  std::thread progress([&] {
    double last = Now();
    while (running) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (Now() - last >= config_.progress_every_s()) {
        last = Now();
        Progress(false);
      }
    }
  });
  pool.OnEach([&](PythonWorker& w, int) {
    for (int64_t i = Claim(); i >= 0; i = Claim()) Finish(RunCandidate(w, i));
  });
  running = false;
  progress.join();
  Progress(true);
  journal_.reset();
  RunStats run;
  run.seconds = Now() - started_;
  run.workers = config_.workers();
  {
    absl::MutexLock l(&mu_);
    run.decided = run_done_;
    run.accepted = run_accepted_;
  }
  return WriteOutputs(config_, *cat, state_dir_, run);
}

}  // namespace kernelrl
