// data_synth: one command from the installed torch to a task set (docs/DATA.md).
//
//   data_synth --config=data/data_config.textproto [--set=target_accepted=2000 ...]
//
// Configuration: DataConfig (data/data.proto) through common/config (--config,
// --config_text, --set, --print_config). Exit 2 on bad configuration, 1 on a
// failed run, 0 when the outputs are written (also after SIGINT/SIGTERM, which
// stop claiming candidates and let the running ones finish). Run it again with
// the same out_dir to resume.
#include <csignal>
#include <iostream>
#include <thread>

#include "common/config.h"
#include "data/data.pb.h"
#include "data/pipeline.h"

namespace {

constexpr char kDefaults[] = R"pb(
  python: "python3"
  harness_root: "."
  ops_file: "data/ops.textproto"
  seed: 1
  target_accepted: 100
  workers: 2
  progress_every_s: 10
  request_timeout_s: 120
  id_prefix: "synth_"
  sampler { transformers_share: 0.0118 min_target_ms: 2 max_target_ms: 20 max_tensor_bytes: 1073741824 }
  target { device: "cpu" }
  filters { compile_backend: "inductor" oom_retries: 1 }
  decontamination { max_similarity: 0.9 dedup: true histogram_bins: 20 }
)pb";

kernelrl::Pipeline* g_pipeline = nullptr;

}  // namespace

int main(int argc, char** argv) {
  kernelrl::v1::DataConfig config;
  auto request = kernelrl::LoadConfig(argc, argv, kDefaults, &config);
  if (!request.ok()) {
    std::cerr << "data_synth: bad configuration: " << request.status().message() << "\n";
    return 2;
  }
  if (request->help) {
    std::cout << kernelrl::ConfigUsage(argv[0], config.GetDescriptor()->full_name());
    return 0;
  }
  auto full = kernelrl::WithDataDefaults(config);
  if (!full.ok()) {
    std::cerr << "data_synth: bad configuration: " << full.status().message() << "\n";
    return 2;
  }
  if (request->print_config) {
    std::cout << full->DebugString();
    return 0;
  }
  kernelrl::Pipeline pipeline(*full);
  // SIGINT/SIGTERM: a watcher thread asks the pipeline to stop (no work in the handler).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  g_pipeline = &pipeline;
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::cerr << "data_synth: signal " << sig << ", finishing running candidates\n";
    g_pipeline->RequestStop();
  }).detach();
  const auto st = pipeline.Run();
  if (!st.ok()) {
    std::cerr << "data_synth: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
