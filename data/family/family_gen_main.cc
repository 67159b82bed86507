// family_gen: writes the learnable task family (data/family/family.h) as the
// learner's task-set files, in one command:
//
//   family_gen --out=DIR [--device=cuda|cpu] [--probe=NAME,...] [--reading_per_family=N --reading_seed=S]
//
//   DIR/train.jsonl, DIR/heldout.jsonl   one kernelrl.v1.Task (proto3 JSON) a line:
//                                        JobSpec.task_set names train.jsonl directly
//   DIR/train/*.py, DIR/heldout/*.py     the same tasks as KernelBench files (what
//                                        `kernelrl eval --set=task_dirs=DIR/heldout` reads)
//   DIR/manifest.tsv                     id, split, reason, family, ops, shape
//   DIR/probe/NAME.py                    --probe's tasks, outside the split (sizes to measure
//                                        before choosing them; data/family/family.h MakeProbe)
//   DIR/reading.jsonl, DIR/reading/*.py  with --reading_per_family: compositions for the code
//                                        model's corpus alone (MakeReadingTasks), split "reading"
// Task metadata: family, ops, shape, split ("train" / "heldout" / "reading"), split_reason.
// --device=cpu writes CPU-sized shapes and inputs.device "cpu" (the sandbox's CPU
// backend, CI); cuda writes H100-sized ones.
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "data/family/family.h"
#include "google/protobuf/util/json_util.h"
#include "profiler_service/task_key.h"
#include "proto/task.pb.h"

ABSL_FLAG(std::string, out, "", "output directory");
ABSL_FLAG(std::string, device, "cuda", "cuda (H100 sizes) or cpu (CPU-backend sizes)");
ABSL_FLAG(std::vector<std::string>, probe, {}, "tasks outside the split to write too, e.g. ge_relu_2048x256x4096");
ABSL_FLAG(int, reading_per_family, 0, "corpus-only compositions a family (reading.jsonl)");
ABSL_FLAG(uint64_t, reading_seed, 1, "seed of the corpus-only compositions");

int main(int argc, char** argv) {
  using namespace kernelrl;
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out), device = absl::GetFlag(FLAGS_device);
  if (out.empty() || (device != "cuda" && device != "cpu")) {
    std::fprintf(stderr, "usage: family_gen --out=DIR [--device=cuda|cpu] [--probe=NAME,...]\n");
    return 2;
  }
  std::vector<data::family::FamilyTask> probes;
  for (const std::string& name : absl::GetFlag(FLAGS_probe)) {
    absl::StatusOr<data::family::FamilyTask> probe = data::family::MakeProbe(name);
    if (!probe.ok()) {
      std::fprintf(stderr, "family_gen: %s\n", probe.status().ToString().c_str());
      return 2;
    }
    probes.push_back(*std::move(probe));
  }
  std::error_code ec;
  for (const char* d : {"train", "heldout"}) std::filesystem::create_directories(out + "/" + d, ec);
  if (absl::GetFlag(FLAGS_reading_per_family) > 0) std::filesystem::create_directories(out + "/reading", ec);
  if (!probes.empty()) std::filesystem::create_directories(out + "/probe", ec);
  if (ec) {
    std::fprintf(stderr, "family_gen: %s: %s\n", out.c_str(), ec.message().c_str());
    return 1;
  }
  std::string train, heldout, reading, manifest = "id\tsplit\treason\tfamily\tops\tshape\n";
  int n_train = 0, n_heldout = 0;
  auto manifest_row = [&manifest](const data::family::FamilyTask& ft, const std::string& split, const std::string& reason) {
    absl::StrAppend(&manifest, ft.id, "\t", split, "\t", reason, "\t", ft.spec.family, "\t", absl::StrJoin(ft.spec.ops, ","),
                    "\t", absl::StrJoin(ft.shape, "x"), "\n");
  };
  // One task set line (proto3 JSON) and its KernelBench file; false when either cannot be written.
  auto write_task = [&](const data::family::FamilyTask& ft, const std::string& split, std::string* lines) {
    v1::Task t;
    t.set_id(ft.id);
    t.set_reference_source(ft.source);
    t.set_level(0);
    t.mutable_inputs()->set_device(device);
    if (device == "cpu") t.mutable_inputs()->set_dtype("float32");
    t.set_content_hash(ContentHashOf(t));
    auto& md = *t.mutable_metadata();
    md["family"] = ft.spec.family;
    md["ops"] = absl::StrJoin(ft.spec.ops, ",");
    md["shape"] = absl::StrJoin(ft.shape, "x");
    md["split"] = split;
    md["split_reason"] = ft.split_reason;
    md["source"] = "data/family";
    std::string line;
    google::protobuf::util::JsonPrintOptions opts;
    opts.preserve_proto_field_names = false;
    if (!google::protobuf::util::MessageToJsonString(t, &line, opts).ok()) return false;
    absl::StrAppend(lines, line, "\n");
    manifest_row(ft, split, ft.split_reason.empty() ? "-" : ft.split_reason);
    return WriteFileAtomically(out + "/" + ft.id + ".py", ft.source).ok();
  };
  for (const data::family::FamilyTask& ft : data::family::MakeTasks(device)) {
    if (!write_task(ft, ft.held_out ? "heldout" : "train", ft.held_out ? &heldout : &train)) return 1;
    ++(ft.held_out ? n_heldout : n_train);
  }
  const std::vector<data::family::FamilyTask> reading_tasks = data::family::MakeReadingTasks(
      device, absl::GetFlag(FLAGS_reading_per_family), absl::GetFlag(FLAGS_reading_seed));
  for (const data::family::FamilyTask& ft : reading_tasks) {
    if (!write_task(ft, "reading", &reading)) return 1;
  }
  for (const data::family::FamilyTask& ft : probes) {
    manifest_row(ft, "probe", "-");
    if (!WriteFileAtomically(out + "/" + ft.id + ".py", ft.source).ok()) return 1;
  }
  if (!WriteFileAtomically(out + "/train.jsonl", train).ok() || !WriteFileAtomically(out + "/heldout.jsonl", heldout).ok() ||
      (!reading_tasks.empty() && !WriteFileAtomically(out + "/reading.jsonl", reading).ok()) ||
      !WriteFileAtomically(out + "/manifest.tsv", manifest).ok()) {
    std::fprintf(stderr, "family_gen: cannot write to %s\n", out.c_str());
    return 1;
  }
  std::printf("family_gen: %d training and %d held-out tasks%s (%s sizes) in %s\n", n_train, n_heldout,
              reading_tasks.empty() ? "" : absl::StrCat(", ", reading_tasks.size(), " corpus-only").c_str(), device.c_str(),
              out.c_str());
  return 0;
}
