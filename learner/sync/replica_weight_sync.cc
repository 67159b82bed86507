#include "learner/sync/replica_weight_sync.h"

#include <algorithm>
#include <utility>

#include <c10/core/DeviceGuard.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "learner/sync/collective_weight_sync.h"

namespace kernelrl::learner {
namespace {

constexpr char kStop[] = "stop";
constexpr absl::Duration kEndTimeout = absl::Seconds(30);

std::string AnnounceKey(int64_t seq) { return absl::StrCat("weights/", seq); }
std::string AckKey(int64_t seq, int rank) { return absl::StrCat("weights/", seq, "/", rank); }

}  // namespace

CollectiveWeightSink::CollectiveWeightSink(std::unique_ptr<dist::DataParallel> sync, Options options)
    : sync_(std::move(sync)), options_(options) {}

CollectiveWeightSink::~CollectiveWeightSink() {
  // NCCL's communicators are destroyed together: each replica acknowledges
  // the end, then both sides shut down. One that does not answer (gone, or
  // the group broken) would hold this side's shutdown forever: abort then.
  bool together = !broken_;
  if (auto s = sync_->StoreSet(AnnounceKey(seq_), kStop); !s.ok()) {
    KLOG(WARNING) << "policy replicas: cannot announce the end: " << s;
    together = false;
  }
  // A live replica answers within its poll; a learner leaving should not
  // wait a publication's whole timeout for one that is gone.
  const absl::Duration wait = std::min(options_.ack_timeout, kEndTimeout);
  for (int r = 1; together && r < sync_->world_size(); ++r) {
    auto ack = sync_->StoreGet(AckKey(seq_, r), wait);
    if (!ack.ok() || *ack != kStop) {
      KLOG(WARNING) << "policy replica " << r << " did not acknowledge the end; aborting the sync group";
      together = false;
    }
  }
  if (together) {
    sync_->Shutdown();
  } else {
    sync_->Abort();
  }
}

absl::Status CollectiveWeightSink::Publish(const std::string& hf_dir, int64_t version) {
  auto policy = Transformer::Load(hf_dir, Head::kLanguageModel, ModelOptions{});
  if (!policy.ok()) return policy.status();
  return PublishModel(**policy, version);
}

absl::Status CollectiveWeightSink::PublishModel(const Transformer& policy, int64_t version) {
  return Publication(version, [&] {
    return SendModel(policy, *sync_->backend(), version, options_.wire_device, options_.wire_dtype);
  });
}

absl::Status CollectiveWeightSink::PublishShards(dist::ShardedWeights& weights, int64_t version) {
  return Publication(version, [&] { return SendWeights(weights, sync_->backend().get(), version, options_.wire_device); });
}

absl::Status CollectiveWeightSink::Publication(int64_t version, const std::function<absl::Status()>& send) {
  if (broken_) {
    return absl::FailedPreconditionError(
        "policy replicas: an earlier weight sync failed midway; the sync group cannot be used again");
  }
  const int64_t seq = seq_++;
  if (auto s = sync_->StoreSet(AnnounceKey(seq), absl::StrCat(version)); !s.ok()) return s;
  if (auto s = send(); !s.ok()) {
    broken_ = true;
    return s;
  }
  for (int r = 1; r < sync_->world_size(); ++r) {
    auto ack = sync_->StoreGet(AckKey(seq, r), options_.ack_timeout);
    if (!ack.ok()) {
      return absl::DeadlineExceededError(absl::StrCat("policy replica ", r, " did not take version ", version,
                                                      " within ", absl::FormatDuration(options_.ack_timeout), ": ",
                                                      ack.status().message()));
    }
    if (*ack != absl::StrCat(version)) {
      return absl::DataLossError(absl::StrCat("policy replica ", r, " took version ", *ack, " for ", version));
    }
  }
  return absl::OkStatus();
}

ReplicaWeightReceiver::ReplicaWeightReceiver(dist::DataParallel* sync, ModelOptions options, Swap swap)
    : sync_(sync), options_(std::move(options)), swap_(std::move(swap)) {}

absl::StatusOr<int64_t> ReplicaWeightReceiver::Next(absl::Duration wait) {
  auto announced = sync_->StoreGet(AnnounceKey(seq_), wait);
  if (!announced.ok()) return announced.status();
  if (*announced == kStop) {
    if (auto s = sync_->StoreSet(AckKey(seq_, sync_->rank()), kStop); !s.ok()) return s;
    return absl::CancelledError("the learner ended the weight sync");
  }
  int64_t want = 0;
  if (!absl::SimpleAtoi(*announced, &want)) {
    return absl::DataLossError(absl::StrCat("weight sync: announcement ", seq_, " is not a version: ", *announced));
  }
  auto got = ReceiveWeights(*sync_->backend(), options_);
  if (!got.ok()) return got.status();
  if (got->policy_version != want) {
    return absl::DataLossError(
        absl::StrCat("weight sync: version ", got->policy_version, " received where ", want, " was announced"));
  }
  swap_(std::move(got->model), want);
  if (auto s = sync_->StoreSet(AckKey(seq_, sync_->rank()), absl::StrCat(want)); !s.ok()) return s;
  ++seq_;
  return want;
}

absl::Status ReplicaWeightReceiver::Run(const std::atomic<bool>& stop, absl::Duration poll) {
  const c10::DeviceGuard on_engine_device(options_.device);  // This thread's copies and waits.
  while (!stop.load()) {
    auto v = Next(poll);
    if (v.ok()) {
      KLOG(INFO) << "policy replica " << sync_->rank() << ": serving version " << *v;
      continue;
    }
    if (absl::IsDeadlineExceeded(v.status())) continue;  // Nothing announced yet.
    if (absl::IsCancelled(v.status())) {
      sync_->Shutdown();  // Together with the learner's side, which waits for it.
      return absl::OkStatus();
    }
    sync_->Abort();
    return v.status();
  }
  sync_->Abort();  // Stopped before the learner's end: its side aborts when no acknowledgement comes.
  return absl::OkStatus();
}

}  // namespace kernelrl::learner
