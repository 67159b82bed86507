// ExternalWeightSync: each committed policy version reaches rollout servers
// outside the learner (SGLang or vLLM) through their update-from-disk APIs,
// and each server is told the version number, which it then reports with
// every response (SGLang) or on request (vLLM), so actors stamp each turn
// with the version that served it (agent/policy/openai_policy.h).
//
//   SGLang: POST /update_weights_from_disk {model_path, weight_version}
//           (it waits for requests in flight), then GET /get_weight_version.
//   vLLM:   the weight-transfer API with the "disk" backend (started with
//           VLLM_SERVER_DEV_MODE=1 --weight-transfer-config
//           '{"backend": "disk"}'): POST /init_weight_transfer_engine once,
//           then per version /pause?mode=wait, /start_weight_update,
//           /update_weights {update_info: {path}}, /finish_weight_update
//           {weight_version}, /resume; then GET /weight_info.
// A server that reports no version yet (vLLM before its first update,
// SGLang started without --weight-version) serves the base checkpoint, which
// is version 0: Create labels it so (POST /update_weight_version; a server
// not up yet is logged and left to the first Publish).
// docs/AGENT.md says what each server needs. Publish returns OK only when
// every server reports the new version; a server that fails is named in the
// error, and the next Publish tries it again. Not thread-safe.
#ifndef KERNELRL_LEARNER_SYNC_EXTERNAL_WEIGHT_SYNC_H_
#define KERNELRL_LEARNER_SYNC_EXTERNAL_WEIGHT_SYNC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "learner/sync/weight_sink.h"
#include "proto/learner_config.pb.h"

namespace kernelrl::learner {

class ExternalWeightSync final : public WeightSink {
 public:
  static absl::StatusOr<std::unique_ptr<ExternalWeightSync>> Create(const v1::ExternalPolicyServers& config);

  absl::Status Publish(const std::string& hf_dir, int64_t version) override;
  // The version server `i` serves now, as it reports it.
  absl::StatusOr<int64_t> ServedVersion(size_t i) const;

 private:
  struct Server {
    std::string base_url;
    bool transfer_ready = false;  // vLLM: init_weight_transfer_engine done.
  };
  explicit ExternalWeightSync(v1::ExternalPolicyServers config);
  // Labels server i "0" when it reports no version.
  absl::Status LabelBase(size_t i);
  absl::StatusOr<Json> Call(const Server& s, const std::string& method, const std::string& path,
                            const Json* body) const;
  absl::Status PublishSglang(Server* s, const std::string& dir, int64_t version);
  absl::Status PublishVllm(Server* s, const std::string& dir, int64_t version);

  const v1::ExternalPolicyServers config_;
  std::vector<Server> servers_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_SYNC_EXTERNAL_WEIGHT_SYNC_H_
