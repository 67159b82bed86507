#include "tools/cli/job_cmd.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"
#include "common/file.h"
#include "grpcpp/grpcpp.h"
#include "proto/learner.grpc.pb.h"
#include "proto/cli_config.pb.h"
#include "proto/learner_config.pb.h"
#include "tools/cli/command_line.h"

namespace kernelrl::cli {
namespace {

int Fail(const grpc::Status& s) {
  std::fprintf(stderr, "kernelrl job: %s: %s\n", absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())).c_str(),
               s.error_message().c_str());
  return 1;
}

void PrintJob(const v1::Job& job) { std::fputs(TextProto(job).c_str(), stdout); }

std::string Summary(const v1::Job& j) {
  std::vector<std::string> metrics;
  for (const char* k : {"reward_mean", "entropy", "explained_variance", "clip_frac", "is_weight_mean",
                        "response_length_clipped_ratio", "tokens_per_second", "buffer_depth"}) {
    auto it = j.metrics().find(k);
    if (it != j.metrics().end()) metrics.push_back(absl::StrCat(k, "=", it->second));
  }
  return absl::StrCat(j.updated_at(), " ", j.id(), " ", v1::Job::State_Name(j.state()), " stage=", j.stage(),
                      " stage_step=", j.stage_step(), " step=", j.step(), " version=", j.policy_version(), " ",
                      absl::StrJoin(metrics, " "), j.message().empty() ? "" : " | " + j.message());
}

constexpr char kSubmitDefaults[] = R"pb(learner: "127.0.0.1:50051")pb";

// `kernelrl job submit`: a kernelrl.v1.JobSubmitConfig from --config/--preset files
// (configs/job/*.textproto) and flags.
int SubmitMain(int argc, char** argv) {
  v1::JobSubmitConfig config;
  CommandLine cl("job", "kernelrl job submit: submit one job to a learner; prints it.", &config);
  cl.Flag("--learner", "learner", "Learner gRPC address");
  cl.Flag("--name", "spec.name", "Human-readable name");
  cl.Flag("--base_checkpoint", "spec.base_checkpoint", "Hugging Face checkpoint directory");
  cl.Flag("--critic_checkpoint", "spec.critic_checkpoint", "The critic's starting checkpoint (default: the base)");
  cl.Flag("--task_set", "spec.task_set", "JSON-lines file of kernelrl.v1.Task");
  cl.Flag("--max_steps", "spec.max_steps", "Agentic PPO steps (0 = the recipe's)");
  cl.Flag("--rollouts_per_task", "spec.rollouts_per_task", "Rollouts per task (0 = 1)");
  cl.Flag(
      "--hyperparameters",
      [](const std::string& file) -> absl::StatusOr<std::string> {
        auto text = ReadFileToString(file);
        if (!text.ok()) return text.status();
        return "hyperparameters { " + *text + "\n}";
      },
      "A LearnerJobConfig text file [hyperparameters]");
  cl.Flag(
      "--job_set",
      [&cl](const std::string& a) -> absl::StatusOr<std::string> {
        const size_t eq = a.find('=');
        if (eq == std::string::npos) return absl::InvalidArgumentError("expected FIELD=VALUE");
        return cl.Assign("hyperparameters." + a.substr(0, eq), a.substr(eq + 1));
      },
      "FIELD=VALUE of the job's LearnerJobConfig (same as --set=hyperparameters.FIELD=VALUE)");
  if (std::optional<int> code = cl.Parse(argc, argv, kSubmitDefaults)) return *code;
  if (config.spec().base_checkpoint().empty() || config.spec().task_set().empty()) {
    return cl.Fail("spec.base_checkpoint and spec.task_set are required (--base_checkpoint, --task_set)");
  }
  v1::SubmitJobRequest req;
  *req.mutable_spec() = config.spec();
  if (config.has_hyperparameters()) req.mutable_spec()->set_hyperparameters_text(TextProto(config.hyperparameters()));
  auto stub = v1::Learner::NewStub(grpc::CreateChannel(config.learner(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::Job job;
  if (auto s = stub->SubmitJob(&ctx, req, &job); !s.ok()) return Fail(s);
  PrintJob(job);
  return 0;
}

}  // namespace

int JobMain(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "submit") return SubmitMain(argc - 1, argv + 1);
  CLI::App app{"kernelrl job: submit, watch, cancel, pause, resume, list and get learner jobs "
               "(kernelrl job submit --help)", "kernelrl job"};
  app.require_subcommand(1);
  app.fallthrough();  // --learner may follow the subcommand.
  std::string learner = "127.0.0.1:50051";
  app.add_option("--learner", learner, "Learner gRPC address")->capture_default_str();

  // Listed for --help; `kernelrl job submit` is dispatched above (its own config, kernelrl.v1.JobSubmitConfig).
  app.add_subcommand("submit", "Submit a job from --config=job.textproto and flags (kernelrl job submit --help)");
  std::string job_id, reason;
  int page_size = 0;
  CLI::App* get = app.add_subcommand("get", "Print a job");
  get->add_option("job_id", job_id)->required();
  CLI::App* watch = app.add_subcommand("watch", "Print a line per change until the job ends");
  watch->add_option("job_id", job_id)->required();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job_id", job_id)->required();
  cancel->add_option("--reason", reason, "Recorded in the job's message");
  CLI::App* pause = app.add_subcommand("pause", "Hold a running job at its next step boundary (kept across restarts)");
  pause->add_option("job_id", job_id)->required();
  pause->add_option("--reason", reason, "Recorded in the job's message");
  CLI::App* resume = app.add_subcommand("resume", "Let a paused job go on");
  resume->add_option("job_id", job_id)->required();
  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--page_size", page_size, "Jobs per page (0 = all, 50 at a time)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  auto stub = v1::Learner::NewStub(grpc::CreateChannel(learner, grpc::InsecureChannelCredentials()));
  if (get->parsed() || cancel->parsed() || pause->parsed() || resume->parsed()) {
    grpc::ClientContext ctx;
    v1::Job job;
    grpc::Status s;
    if (get->parsed()) {
      v1::GetJobRequest req;
      req.set_job_id(job_id);
      s = stub->GetJob(&ctx, req, &job);
    } else if (pause->parsed()) {
      v1::PauseJobRequest req;
      req.set_job_id(job_id);
      req.set_reason(reason);
      s = stub->PauseJob(&ctx, req, &job);
    } else if (resume->parsed()) {
      v1::ResumeJobRequest req;
      req.set_job_id(job_id);
      s = stub->ResumeJob(&ctx, req, &job);
    } else {
      v1::CancelJobRequest req;
      req.set_job_id(job_id);
      req.set_reason(reason);
      s = stub->CancelJob(&ctx, req, &job);
    }
    if (!s.ok()) return Fail(s);
    PrintJob(job);
    return 0;
  }
  if (watch->parsed()) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    auto reader = stub->WatchJob(&ctx, req);
    v1::Job job;
    while (reader->Read(&job)) {
      std::printf("%s\n", Summary(job).c_str());
      std::fflush(stdout);
    }
    if (auto s = reader->Finish(); !s.ok()) return Fail(s);
    return job.state() == v1::Job::SUCCEEDED ? 0 : 1;
  }
  // list
  v1::ListJobsRequest req;
  req.set_page_size(page_size);
  do {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    if (auto s = stub->ListJobs(&ctx, req, &resp); !s.ok()) return Fail(s);
    for (const v1::Job& j : resp.jobs()) std::printf("%s\n", Summary(j).c_str());
    req.set_page_token(resp.next_page_token());
  } while (page_size == 0 && !req.page_token().empty());
  return 0;
}

}  // namespace kernelrl::cli
