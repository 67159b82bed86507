#include "learner/dist/data_parallel.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "learner/dist/tcp_address.h"

namespace kernelrl::learner::dist {
namespace {

std::chrono::milliseconds Millis(absl::Duration d) { return std::chrono::milliseconds(absl::ToInt64Milliseconds(d)); }

// The TCPStore rank 0 hosted before spawning the other ranks, waiting for
// Connect() in the same process to take it (a second server on the port
// would fail to bind).
std::mutex hosted_mu;
c10::intrusive_ptr<c10d::Store>* hosted = nullptr;
std::string hosted_address;

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> OpenStore(const Rendezvous& r) {
  if (r.world_size < 1 || r.rank < 0 || r.rank >= r.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous: rank ", r.rank, " of world size ", r.world_size));
  }
  try {
    if (absl::string_view path = r.address; absl::ConsumePrefix(&path, "file://")) {
      auto store = c10::make_intrusive<c10d::FileStore>(std::string(path), r.world_size);
      store->setTimeout(Millis(r.timeout));
      return c10::intrusive_ptr<c10d::Store>(store);
    }
    auto tcp = ParseTcpAddress(r.address, "rendezvous address (or file:///path)");
    if (!tcp.ok()) return tcp.status();
    {
      std::lock_guard<std::mutex> lock(hosted_mu);
      if (hosted != nullptr && hosted_address == r.address) {
        c10::intrusive_ptr<c10d::Store> s = *hosted;
        delete hosted;
        hosted = nullptr;
        return s;
      }
    }
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(tcp->port);
    o.isServer = false;
    o.timeout = Millis(r.timeout);
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::TCPStore>(tcp->host, o));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rendezvous at ", r.address, ": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::string> DataParallel::HostTcpStore(const std::string& host, int port, absl::Duration timeout) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("TCPStore port ", port));
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(port);  // 0: a free port, chosen by the kernel.
    o.isServer = true;
    o.waitWorkers = false;  // The workers do not exist yet.
    o.timeout = Millis(timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(host, o);
    const std::string address = absl::StrCat("tcp://", host, ":", store->getPort());
    std::lock_guard<std::mutex> lock(hosted_mu);
    delete hosted;
    hosted = new c10::intrusive_ptr<c10d::Store>(store);
    hosted_address = address;
    return address;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("hosting a TCPStore on port ", port, " (reached as ", host, "): ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Connect(const Rendezvous& r, at::Device device,
                                                                    const BackendFactory& make_backend) {
  auto store = OpenStore(r);
  if (!store.ok()) return store.status();
  try {
    auto pg_store = c10::make_intrusive<c10d::PrefixStore>("pg", *store);
    c10::intrusive_ptr<c10d::Backend> backend = make_backend(pg_store, r.rank, r.world_size);
    auto ctl = c10::make_intrusive<c10d::PrefixStore>("ctl", *store);
    return std::unique_ptr<DataParallel>(new DataParallel(*store, ctl, std::move(backend), device, make_backend));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("data-parallel backend, rank ", r.rank, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::ConnectNccl(const Rendezvous& r, int cuda_device) {
#ifdef USE_C10D_NCCL
  if (!at::hasCUDA()) return absl::FailedPreconditionError("data-parallel NCCL: no CUDA device");
  const int count = c10::cuda::device_count();
  if (cuda_device < 0 || cuda_device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("data-parallel NCCL: rank ", r.rank, " wants cuda:",
                                                      cuda_device, " but this machine has ", count, " GPU(s)"));
  }
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(cuda_device));
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
  const std::chrono::milliseconds timeout = Millis(r.timeout);
  return Connect(r, device, [timeout, device](c10::intrusive_ptr<c10d::Store> store, int rank, int size) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
    pg->eagerConnectSingleDevice(device);  // Communicators now, not inside the first step.
    return c10::intrusive_ptr<c10d::Backend>(pg);
  });
#else
  (void)r, (void)cuda_device;
  return absl::UnimplementedError("built without USE_C10D_NCCL");
#endif
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Subgroup(const std::string& name,
                                                                     const std::vector<int>& ranks) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank());
  if (me == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("subgroup ", name, ": rank ", rank(), " is not in it"));
  }
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("group/", name), root_);
    const int index = static_cast<int>(me - ranks.begin()), size = static_cast<int>(ranks.size());
    c10::intrusive_ptr<c10d::Backend> backend = make_backend_(c10::make_intrusive<c10d::PrefixStore>("pg", store), index, size);
    auto ctl = c10::make_intrusive<c10d::PrefixStore>("ctl", store);
    return std::unique_ptr<DataParallel>(new DataParallel(store, ctl, std::move(backend), device_, make_backend_));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("subgroup ", name, ", rank ", rank(), ": ", e.what()));
  }
}

void DataParallel::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  try {
    backend_->shutdown();  // ProcessGroupNCCL: destroys its communicators (it warns when destroyed without).
  } catch (const std::exception& e) {
    (void)e;  // Leaving anyway.
  }
}

void DataParallel::Abort() {
  if (shut_down_) return;
  shut_down_ = true;
  try {
    backend_->abort();
  } catch (const std::exception& e) {
    (void)e;  // Leaving anyway.
  }
}

DataParallel::~DataParallel() { Shutdown(); }

int DataParallel::rank() const { return backend_->getRank(); }
int DataParallel::world_size() const { return backend_->getSize(); }

absl::Status DataParallel::AllReduceSum(std::vector<at::Tensor>& tensors) { return Collective(tensors, Op::kSum, 0); }
absl::Status DataParallel::AllReduceMax(std::vector<at::Tensor>& tensors) { return Collective(tensors, Op::kMax, 0); }
absl::Status DataParallel::Broadcast(std::vector<at::Tensor>& tensors, int root) {
  return Collective(tensors, Op::kBroadcast, root);
}

absl::Status DataParallel::Collective(std::vector<at::Tensor>& tensors, Op op, int root) {
  at::NoGradGuard no_grad;
  try {
    size_t i = 0;
    while (i < tensors.size()) {
      // The bucket: tensors [i, j) of one dtype and at most bucket_bytes_ (at least one tensor).
      const at::ScalarType type = tensors[i].scalar_type();
      const at::ScalarType wire =
          op != Op::kBroadcast && at::isFloatingType(type) && at::elementSize(type) < 4 ? at::kFloat : type;
      size_t j = i;
      int64_t bytes = 0;
      std::vector<at::Tensor> flat;
      while (j < tensors.size() && tensors[j].scalar_type() == type &&
             (j == i || bytes + tensors[j].numel() * at::elementSize(wire) <= bucket_bytes_)) {
        bytes += tensors[j].numel() * at::elementSize(wire);
        flat.push_back(tensors[j].reshape({-1}).to(device_, wire));
        ++j;
      }
      std::vector<at::Tensor> bucket = {flat.size() == 1 ? flat[0].contiguous() : at::cat(flat)};
      c10::intrusive_ptr<c10d::Work> work;
      if (op == Op::kBroadcast) {
        c10d::BroadcastOptions o;
        o.rootRank = root;
        work = backend_->broadcast(bucket, o);
      } else {
        c10d::AllreduceOptions o;
        o.reduceOp = op == Op::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
        work = backend_->allreduce(bucket, o);
      }
      if (!work->wait()) return absl::InternalError("collective did not complete");
      int64_t offset = 0;
      for (size_t k = i; k < j; ++k) {
        const int64_t n = tensors[k].numel();
        tensors[k].copy_(bucket[0].narrow(0, offset, n).view(tensors[k].sizes()));
        offset += n;
      }
      i = j;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("data-parallel collective on rank ", rank(), ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status DataParallel::Barrier() {
  std::vector<at::Tensor> one = {at::ones({1}, at::TensorOptions().device(device_))};
  return AllReduceSum(one);
}

absl::Status DataParallel::StoreSet(const std::string& key, const std::string& value) {
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("store set ", key, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DataParallel::StoreGet(const std::string& key, absl::Duration timeout) {
  try {
    store_->wait({key}, Millis(timeout));
    const std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  } catch (const c10::DistStoreError& e) {
    return absl::DeadlineExceededError(absl::StrCat("store get ", key, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("store get ", key, ": ", e.what()));
  }
}

}  // namespace kernelrl::learner::dist
