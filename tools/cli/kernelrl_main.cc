// `kernelrl`: one binary for the researcher's commands. Each subcommand is a
// `int Main(int argc, char** argv)` (argv[0] = its name) in its own file;
// adding one is one line in kSubcommands.
#include <cstdio>
#include <cstring>

#include "tools/cli/eval_cmd.h"
#include "tools/cli/job_cmd.h"
#include "tools/cli/learn_cmd.h"
#include "tools/cli/report_cmd.h"
#include "tools/cli/plan_cmd.h"
#include "tools/cli/seeds_cmd.h"
#include "tools/cli/up_cmd.h"

namespace {

struct Subcommand {
  const char* name;
  int (*main)(int argc, char** argv);
  const char* help;
};

constexpr Subcommand kSubcommands[] = {
    {"job", kernelrl::cli::JobMain, "submit | get | watch | cancel | list learner jobs"},
    {"eval", kernelrl::cli::EvalMain, "run a policy over a task set; Table-1 report (JSON, Markdown, PNG)"},
    {"report", kernelrl::cli::ReportMain, "re-render an evaluation's Table 1 and plots: kernelrl report DIR"},
    {"learn", kernelrl::cli::LearnMain, "the recipe end to end on the task family (data/family); curves + plots"},
    {"seeds", kernelrl::cli::SeedsMain, "learn jobs of several seeds and ablations against a learning run's bar"},
    {"plan", kernelrl::cli::PlanMain, "per-GPU memory of a training job (model, GPUs, tokens) and whether it fits"},
    {"up", kernelrl::up::UpMain, "the embedded cluster on this machine; runs the quickstart job (--check, --job=none)"},
};

int Usage(FILE* out) {
  std::fprintf(out, "usage: kernelrl <command> [flags]   (kernelrl <command> --help)\n\ncommands:\n");
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-6s %s\n", s.name, s.help);
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    return Usage(stdout);
  }
  for (const Subcommand& s : kSubcommands) {
    if (!std::strcmp(argv[1], s.name)) return s.main(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kernelrl: unknown command '%s'\n", argv[1]);
  return Usage(stderr);
}
