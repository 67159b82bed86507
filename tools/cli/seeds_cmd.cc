#include "tools/cli/seeds_cmd.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file.h"
#include "proto/cli_config.pb.h"
#include "tools/cli/command_line.h"
#include "tools/cli/seeds_report.h"

namespace kernelrl::cli {
namespace {

constexpr char kDefaults[] = R"pb(
  min_standard_errors: 2
  min_explained_variance: 0.3
  min_seeds: 3
  min_heldout_tasks: 12
  min_model_tokens: 2000
)pb";

// RUN@ppo_start+NEXT: of RUN only its PPO-start evaluation, NEXT's start (SeedFiguresOf).
constexpr absl::string_view kPpoStartOnly = "@ppo_start";

// A job's curves.json given as itself, its curves/ directory or the job directory.
std::string CurvesFile(const std::string& run) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(run, ec)) return run;
  for (const char* rel : {"/curves.json", "/curves/curves.json"}) {
    if (fs::exists(run + rel, ec)) return run + rel;
  }
  return run + "/curves.json";  // Reading it names what is missing.
}

// A run's curves.json (CurvesFile) read and parsed: its path and contents.
absl::StatusOr<std::pair<std::string, Json>> ReadCurves(const std::string& run) {
  const std::string path = CurvesFile(run);
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto json = ParseJson(*text);
  if (!json.ok()) return absl::InvalidArgumentError(path + ": " + std::string(json.status().message()));
  return std::pair<std::string, Json>(path, std::move(*json));
}

}  // namespace

int SeedsMain(int argc, char** argv) {
  v1::SeedsConfig config;
  CommandLine cl("seeds", "Several `kernelrl learn` jobs (seeds, ablations) against a learning run's bar.", &config);
  cl.Flag("runs", "runs", "A job's curves.json (or its directory); one seed's jobs joined by '+'; RUN@ppo_start+NEXT: NEXT from RUN's PPO-start policy");
  cl.Flag("--rescored", "rescored",
          "A `kernelrl learn --eval_only` run (repeat the flag): it replaces the start or final evaluation that scored its weights; several of the same weights, their mean");
  cl.Flag("--min_standard_errors", "min_standard_errors", "The mean change across seeds must exceed this many");
  cl.Flag("--min_explained_variance", "min_explained_variance", "Each seed's median critic EV during PPO must exceed it");
  cl.Flag("--min_model_tokens", "min_model_tokens", "Each seed's PPO trajectories must average this many model tokens");
  if (std::optional<int> code = cl.Parse(argc, argv, kDefaults)) return *code;
  if (config.runs().empty()) return cl.Fail("which jobs? kernelrl seeds RUN... (a curves.json each; '+' joins one seed's)");
  std::vector<std::pair<std::string, Json>> rescored_runs;
  for (const std::string& run : config.rescored()) {
    auto curves = ReadCurves(run);
    if (!curves.ok()) return cl.Fail(std::string(curves.status().message())), 1;
    rescored_runs.push_back(std::move(*curves));
  }
  auto rescorings = RescoringsOf(rescored_runs);
  if (!rescorings.ok()) return cl.Fail(std::string(rescorings.status().message())), 1;
  std::vector<SeedFigures> runs;
  for (const std::string& run : config.runs()) {
    std::vector<std::pair<std::string, Json>> chain;
    bool from_ppo_start = false;
    for (absl::string_view part : absl::StrSplit(run, '+', absl::SkipEmpty())) {
      if (chain.empty() && absl::ConsumeSuffix(&part, kPpoStartOnly)) from_ppo_start = true;
      auto curves = ReadCurves(std::string(part));
      if (!curves.ok()) return cl.Fail(std::string(curves.status().message())), 1;
      chain.push_back(std::move(*curves));
    }
    auto figures = SeedFiguresOf(chain, from_ppo_start);
    if (!figures.ok()) return cl.Fail(std::string(figures.status().message())), 1;
    if (!rescorings->empty()) {
      if (absl::Status s = Rescore(*rescorings, &*figures); !s.ok()) return cl.Fail(std::string(s.message())), 1;
    }
    if (absl::Status s = CheckScored(*figures); !s.ok()) return cl.Fail(std::string(s.message())), 1;
    runs.push_back(std::move(*figures));
  }
  std::fputs(SeedsReport(runs, config).c_str(), stdout);
  return 0;
}

}  // namespace kernelrl::cli
