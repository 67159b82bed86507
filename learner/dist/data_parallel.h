// Data-parallel collectives over LibTorch's c10d: one process per GPU, a c10d
// store for the rendezvous, ProcessGroupNCCL for the all-reduces. Implements
// rl::Collectives for the Trainer.
//
//   rank 0:    HostTcpStore() -> spawn ranks 1..N-1 with its address
//              (learner/dist/launcher.h) -> Connect()
//   rank r>0:  Connect() with the address it was given
//
// Tensors are reduced in buckets of at most bucket_bytes: consecutive tensors
// of one dtype are flattened into one buffer, reduced with one collective and
// copied back. Floating-point tensors narrower than fp32 (bf16 gradients) are
// summed in fp32 so that the sum of N ranks rounds once, not N - 1 times.
//
// The store also carries small control messages between ranks (StoreSet /
// StoreGet: which trajectories a rank trains on next), under its own prefix.
// Not thread-safe: one thread drives a DataParallel.
#ifndef KERNELRL_LEARNER_DIST_DATA_PARALLEL_H_
#define KERNELRL_LEARNER_DIST_DATA_PARALLEL_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "learner/rl/collectives.h"

namespace kernelrl::learner::dist {

struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  // "tcp://host:port" (the TCPStore rank 0 hosts) or "file:///path" (a c10d
  // FileStore on a filesystem all ranks share; the file must not exist yet).
  std::string address;
  absl::Duration timeout = absl::Minutes(10);  // Rendezvous, store reads and collectives.
};

class DataParallel : public rl::Collectives {
 public:
  // Rank 0 of a TCP rendezvous: serves the store on `port` (0: a free one)
  // on every interface before the other ranks exist; returns the address to
  // hand them ("tcp://host:port", `host` being the name they reach it by).
  // The store lives until Connect() takes it over.
  static absl::StatusOr<std::string> HostTcpStore(const std::string& host, int port, absl::Duration timeout);

  // Joins the rendezvous and makes a ProcessGroupNCCL on cuda:<cuda_device>.
  // FailedPrecondition without CUDA or when the device does not exist.
  static absl::StatusOr<std::unique_ptr<DataParallel>> ConnectNccl(const Rendezvous& r, int cuda_device);

  // Joins the rendezvous with any c10d backend the factory makes over the
  // store (the CPU tests pass one: the wheel's gloo backend has no headers).
  using BackendFactory = std::function<c10::intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Store> store,
                                                                         int rank, int world_size)>;
  static absl::StatusOr<std::unique_ptr<DataParallel>> Connect(const Rendezvous& r, at::Device device,
                                                               const BackendFactory& make_backend);

  ~DataParallel() override;

  int rank() const override;
  int world_size() const override;
  absl::Status AllReduceSum(std::vector<at::Tensor>& tensors) override;
  absl::Status AllReduceMax(std::vector<at::Tensor>& tensors) override;
  absl::Status Broadcast(std::vector<at::Tensor>& tensors, int root) override;
  absl::Status Barrier();
  // Flushes and destroys the backend's communicators, keeping the store
  // (StoreSet/StoreGet still work; collectives do not). With NCCL this
  // waits for the other ranks to do the same (ncclCommDestroy returns once
  // the peers' communicators have disconnected from this rank's proxy), so
  // rank 0 calls it before waiting for the ranks it spawned to exit: a
  // follower's ~DataParallel shuts down too, and would wait for rank 0's
  // communicators forever. Idempotent; the destructor calls it.
  void Shutdown();
  // Aborts the communicators instead (ncclCommAbort): for a group whose
  // peers may be gone, where Shutdown would wait for them. Keeps the store.
  void Abort();

  // Control messages (key -> bytes); StoreGet waits up to `timeout` for the key.
  absl::Status StoreSet(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> StoreGet(const std::string& key, absl::Duration timeout);

  // A group of some of the ranks over the same store and the same kind of
  // backend (hybrid sharding's shard and replicate groups): every rank in
  // `ranks` (ranks of this group, this one among them) calls it with the same
  // name and ranks; a name is used once. Its rank is its index in `ranks`.
  absl::StatusOr<std::unique_ptr<DataParallel>> Subgroup(const std::string& name, const std::vector<int>& ranks);

  void set_bucket_bytes(int64_t bytes) { bucket_bytes_ = bytes; }
  // The process group, shared with sharded models (learner/dist/fsdp.h):
  // both issue collectives in the one order every rank follows.
  c10::intrusive_ptr<c10d::Backend> backend() const { return backend_; }
  // The device collectives run on (cuda:<rank> for NCCL).
  at::Device device() const { return device_; }

 private:
  DataParallel(c10::intrusive_ptr<c10d::Store> root, c10::intrusive_ptr<c10d::Store> store,
               c10::intrusive_ptr<c10d::Backend> backend, at::Device device, BackendFactory make_backend)
      : root_(std::move(root)),
        store_(std::move(store)),
        backend_(std::move(backend)),
        device_(device),
        make_backend_(std::move(make_backend)) {}
  enum class Op { kSum, kMax, kBroadcast };
  absl::Status Collective(std::vector<at::Tensor>& tensors, Op op, int root);

  c10::intrusive_ptr<c10d::Store> root_;     // The rendezvous store, unprefixed.
  c10::intrusive_ptr<c10d::Store> store_;    // Control messages ("ctl/" prefix).
  c10::intrusive_ptr<c10d::Backend> backend_;
  at::Device device_;
  BackendFactory make_backend_;
  int64_t bucket_bytes_ = int64_t{256} << 20;
  bool shut_down_ = false;
};

}  // namespace kernelrl::learner::dist

#endif  // KERNELRL_LEARNER_DIST_DATA_PARALLEL_H_
