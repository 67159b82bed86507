// corpus_value_set: a corpus as the critic's value-pretraining data (tools/codemodel/value_set.h).
//
//   corpus_value_set --corpus_dir=DIR --out=DIR [--profile_prefixes=true]
//
// DIR holds corpus_gen's corpus.jsonl and tokenizer.json. Prints one JSON object: the episodes,
// the prefixes and the trajectories written by reward.
#include <cstdio>
#include <map>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "tools/codemodel/value_set.h"

ABSL_FLAG(std::string, corpus_dir, "", "corpus_gen's output (corpus.jsonl, tokenizer.json)");
ABSL_FLAG(std::string, out, "", "the value set's directory (a job directory of accepted trajectories)");
ABSL_FLAG(bool, profile_prefixes, true, "also each episode cut after every Profile call, valued by what it paid");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_corpus_dir), out = absl::GetFlag(FLAGS_out);
  if (dir.empty() || out.empty()) {
    std::fprintf(stderr, "corpus_value_set: usage: --corpus_dir=DIR --out=DIR [--profile_prefixes=true]\n");
    return 2;
  }
  auto summary = kernelrl::codemodel::WriteValueSet(dir + "/corpus.jsonl", dir + "/tokenizer.json",
                                                    absl::GetFlag(FLAGS_profile_prefixes), out);
  if (!summary.ok()) {
    std::fprintf(stderr, "corpus_value_set: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::map<double, int64_t> by_reward;
  for (double r : summary->rewards) ++by_reward[r];
  std::string hist;
  for (const auto& [r, n] : by_reward) absl::StrAppend(&hist, hist.empty() ? "" : ", ", "\"", r, "\": ", n);
  std::printf("{\"episodes\": %lld, \"prefixes\": %lld, \"by_reward\": {%s}}\n",
              static_cast<long long>(summary->episodes), static_cast<long long>(summary->prefixes), hist.c_str());
  return 0;
}
