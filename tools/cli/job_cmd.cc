#include "tools/cli/job_cmd.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"
#include "common/file.h"
#include "grpcpp/grpcpp.h"
#include "proto/learner.grpc.pb.h"
#include "proto/learner_config.pb.h"

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

}  // namespace

int JobMain(int argc, char** argv) {
  CLI::App app{"kernelrl job: submit, watch, cancel, pause, resume, list and get learner jobs", "kernelrl job"};
  app.require_subcommand(1);
  app.fallthrough();  // --learner may follow the subcommand.
  std::string learner = "127.0.0.1:50051";
  app.add_option("--learner", learner, "Learner gRPC address")->capture_default_str();

  v1::JobSpec spec;
  std::string name, base, task_set, hp_file;
  int max_steps = 0, rollouts = 0;
  std::vector<std::string> sets;
  CLI::App* submit = app.add_subcommand("submit", "Submit a job; prints it");
  submit->add_option("--name", name, "Human-readable name");
  submit->add_option("--base_checkpoint", base, "Hugging Face checkpoint directory")->required();
  submit->add_option("--task_set", task_set, "JSON-lines file of kernelrl.v1.Task")->required();
  submit->add_option("--max_steps", max_steps, "Agentic PPO steps (0 = the recipe's)");
  submit->add_option("--rollouts_per_task", rollouts, "Rollouts per task (0 = 1)");
  submit->add_option("--hyperparameters", hp_file, "LearnerJobConfig text file");
  submit->add_option("--set", sets, "Override a LearnerJobConfig field: path.to.field=VALUE (repeatable)");

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
  if (submit->parsed()) {
    std::string hp;
    if (!hp_file.empty()) {
      auto text = ReadFileToString(hp_file);
      if (!text.ok()) {
        std::fprintf(stderr, "kernelrl job submit: --hyperparameters: %s\n", std::string(text.status().message()).c_str());
        return 2;
      }
      hp = *text;
    }
    for (const std::string& s : sets) {
      auto text = DottedAssignmentToText(s, v1::LearnerJobConfig::descriptor());
      if (!text.ok()) {
        std::fprintf(stderr, "kernelrl job submit: --set=%s: %s\n", s.c_str(), std::string(text.status().message()).c_str());
        return 2;
      }
      absl::StrAppend(&hp, "\n", *text);
    }
    v1::SubmitJobRequest req;
    v1::JobSpec* sp = req.mutable_spec();
    sp->set_name(name);
    sp->set_base_checkpoint(base);
    sp->set_task_set(task_set);
    sp->set_max_steps(max_steps);
    sp->set_rollouts_per_task(rollouts);
    sp->set_hyperparameters_text(hp);
    grpc::ClientContext ctx;
    v1::Job job;
    if (auto s = stub->SubmitJob(&ctx, req, &job); !s.ok()) return Fail(s);
    PrintJob(job);
    return 0;
  }
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
