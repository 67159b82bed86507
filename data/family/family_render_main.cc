// family_render: the candidate files of a family task for a choice vector.
//
//   family_render --task=FILE.py --choice=2103 [--device=cuda|cpu] --out=DIR
//       writes DIR/model_new.py and DIR/kernels/<family>.cu (or .cc)
//   family_render --task=FILE.py --choices=sweep|all [--device=...] --out=DIR
//       one DIR/<digits>/ per choice (sweep: a base choice and every single-slot
//       change of it; all: every choice) and DIR/choices.tsv (digits, description)
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "agent/family/templates.h"

ABSL_FLAG(std::string, task, "", "family task file (.py)");
ABSL_FLAG(std::string, choice, "", "one choice as digits, e.g. 2103");
ABSL_FLAG(std::string, choices, "", "sweep or all");
ABSL_FLAG(std::string, device, "cuda", "cuda or cpu");
ABSL_FLAG(std::string, out, "", "output directory");

namespace fam = kernelrl::agent::family;

namespace {

int Write(const fam::TaskSpec& spec, const fam::Choice& c, const std::string& device, const std::string& dir) {
  auto files = fam::Render(spec, c, device);
  if (!files.ok()) {
    std::fprintf(stderr, "family_render: %s\n", std::string(files.status().message()).c_str());
    return 1;
  }
  for (const auto& [path, content] : *files) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dir + "/" + path).parent_path(), ec);
    if (!kernelrl::WriteFileAtomically(dir + "/" + path, content).ok()) {
      std::fprintf(stderr, "family_render: cannot write %s/%s\n", dir.c_str(), path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out), device = absl::GetFlag(FLAGS_device);
  auto source = kernelrl::ReadFileToString(absl::GetFlag(FLAGS_task));
  if (!source.ok() || out.empty()) {
    std::fprintf(stderr, "usage: family_render --task=FILE.py (--choice=DIGITS | --choices=sweep|all) --out=DIR\n");
    return 2;
  }
  auto spec = fam::ParseTaskSpec(*source);
  if (!spec.ok()) {
    std::fprintf(stderr, "family_render: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  auto slots = fam::Slots(spec->family);
  if (!absl::GetFlag(FLAGS_choice).empty()) {
    const std::string d = absl::GetFlag(FLAGS_choice);
    fam::Choice c{};
    if (d.size() != fam::kNumSlots) return 2;
    for (int i = 0; i < fam::kNumSlots; ++i) c[i] = d[i] - '0';
    return Write(*spec, c, device, out);
  }
  std::vector<fam::Choice> choices;
  if (absl::GetFlag(FLAGS_choices) == "all") {
    choices = fam::AllChoices(*slots);
  } else {
    // The base: the middle option of every slot but precision (fp32).
    fam::Choice base{};
    for (int i = 0; i < fam::kNumSlots - 1; ++i) base[i] = static_cast<int>((*slots)[i].options.size()) / 2;
    std::set<fam::Choice> seen{base};
    choices.push_back(base);
    for (int i = 0; i < fam::kNumSlots; ++i) {
      for (int o = 0; o < static_cast<int>((*slots)[i].options.size()); ++o) {
        fam::Choice c = base;
        c[i] = o;
        if (seen.insert(c).second) choices.push_back(c);
      }
    }
  }
  std::string tsv;
  for (const fam::Choice& c : choices) {
    if (int rc = Write(*spec, c, device, out + "/" + fam::ChoiceDigits(c)); rc != 0) return rc;
    absl::StrAppend(&tsv, fam::ChoiceDigits(c), "\t", fam::DescribeChoice(*slots, c), "\n");
  }
  return kernelrl::WriteFileAtomically(out + "/choices.tsv", tsv).ok() ? 0 : 1;
}
