// NCCL back end (builds with CUDA only). Unique id through the KV store; non-blocking init and
// operations polled against a deadline, so a dead peer becomes ncclCommAbort plus an Error
// instead of a GPU kernel spinning forever.
#include "worker/runtime/communicators.h"
#include "worker/runtime/cuda_device.h"
#include "worker/contract/env.h"

#if DTRAIN_HAVE_CUDA

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

namespace dtrain::worker {
namespace {

constexpr const char* kUniqueIdKey = "nccl/unique_id/";

std::string to_hex(const void* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < size; ++i) {
    auto byte = static_cast<const unsigned char*>(data)[i];
    hex += digits[byte >> 4];
    hex += digits[byte & 15];
  }
  return hex;
}

bool from_hex(const std::string& hex, void* out, size_t size) {
  if (hex.size() != size * 2) return false;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < size; ++i) {
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
  }
  return true;
}

using Clock = std::chrono::steady_clock;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, CommGroup group, float* scratch,
                   const std::shared_ptr<CommInterrupts>& interrupts)
      : comm_(comm), stream_(stream), group_(std::move(group)), rank_(group_.index), size_(group_.size()),
        scratch_(scratch) {
    // The waiting thread aborts (it owns comm_): an interrupt only tells it to.
    if (interrupts) {
      registration_ = CommInterrupts::add(interrupts, [this](const std::string& why) {
        std::lock_guard lock(interrupted_mutex_);
        if (!interrupted_) interrupted_ = why;
      });
    }
  }
  ~NcclCommunicator() override {
    registration_.reset();
    if (comm_ != nullptr) {
      if (broken_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  const char* backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allreduce_sum(float* data, size_t count, Millis timeout) override {
    return run("allreduce(float32 x " + std::to_string(count) + ")", timeout,
               [&] { return ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream_); });
  }
  Status allreduce_sum(double* data, size_t count, Millis timeout) override {
    return run("allreduce(float64 x " + std::to_string(count) + ")", timeout,
               [&] { return ncclAllReduce(data, data, count, ncclFloat64, ncclSum, comm_, stream_); });
  }
  Status broadcast(void* data, size_t bytes, int root, Millis timeout) override {
    return run("broadcast(" + std::to_string(bytes) + " bytes from rank " + std::to_string(root) + ")", timeout,
               [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
  }
  Status barrier(Millis timeout) override {
    return run("barrier", timeout,
               [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }
  Status send_recv(const void* send_data, size_t send_bytes, int send_to, void* recv_data, size_t recv_bytes,
                   int recv_from, Millis timeout) override {
    std::string what = describe_send_recv(group_, send_bytes, send_to, recv_bytes, recv_from);
    return run(what, timeout, [&] {
      // One group: NCCL posts both before waiting for either (no send/recv ordering deadlock).
      ncclResult_t first_error = ncclGroupStart();
      auto keep_first = [&](ncclResult_t result) {
        if (first_error == ncclSuccess || first_error == ncclInProgress) first_error = result;
      };
      if (send_to != kNoPeer) keep_first(ncclSend(send_data, send_bytes, ncclUint8, send_to, comm_, stream_));
      if (recv_from != kNoPeer) keep_first(ncclRecv(recv_data, recv_bytes, ncclUint8, recv_from, comm_, stream_));
      ncclResult_t ended = ncclGroupEnd();
      return first_error == ncclSuccess || first_error == ncclInProgress ? ended : first_error;
    });
  }
  void abort() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  std::optional<std::string> interrupted() {
    std::lock_guard lock(interrupted_mutex_);
    return interrupted_;
  }

  template <class Enqueue>
  Status run(const std::string& what, Millis timeout, Enqueue enqueue) {
    if (comm_ == nullptr || broken_) return Error{"nccl " + what + ": the communicator was aborted earlier"};
    if (std::optional<std::string> why = interrupted()) return fail(what, "abandoned: " + *why);
    auto deadline = Clock::now() + timeout;
    ncclResult_t result = enqueue();
    // Non-blocking communicator: enqueueing may itself be in progress.
    while (result == ncclInProgress) {
      if (std::optional<std::string> why = interrupted()) return fail(what, "abandoned: " + *why);
      if (Clock::now() > deadline) return fail(what, "timed out enqueueing after " + std::to_string(timeout.count()) + "ms");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm_, &result);
    }
    if (result != ncclSuccess) return fail(what, ncclGetErrorString(result));
    for (;;) {
      cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaSuccess) return {};
      if (done != cudaErrorNotReady) return fail(what, cudaGetErrorString(done));
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        return fail(what, ncclGetErrorString(async_error));
      }
      if (std::optional<std::string> why = interrupted()) return fail(what, "abandoned: " + *why);
      if (Clock::now() > deadline) {
        return fail(what, "no progress within the " + std::to_string(timeout.count()) +
                              "ms timeout; a peer is stopped, hung or gone");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int global(int index) const { return group_.ranks.at(static_cast<size_t>(index)); }

  Status fail(const std::string& what, const std::string& cause) {
    broken_ = true;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    std::string peers;
    for (int i = 0; i < size_; ++i) {
      if (i != rank_) peers += (peers.empty() ? "" : ",") + std::to_string(global(i));
    }
    std::string where = group_.name.empty() ? " of " + std::to_string(size_)
                                            : " (index " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                                  " in its " + group_.name + ")";
    return Error{"nccl " + what + " failed on rank " + std::to_string(global(rank_)) + where + " (peer ranks " +
                 peers + "): " + cause + "; communicator aborted"};
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  CommGroup group_;
  int rank_;
  int size_;
  float* scratch_;
  bool broken_ = false;
  std::mutex interrupted_mutex_;
  std::optional<std::string> interrupted_;
  std::unique_ptr<CommInterrupts::Registration> registration_;
};

}  // namespace

bool nccl_usable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient& kv, const CommGroup& group,
                                                             const Topology& topology, Millis timeout,
                                                             std::shared_ptr<CommInterrupts> interrupts) {
  int devices = 0;
  if (cudaError_t error = cudaGetDeviceCount(&devices); error != cudaSuccess || devices == 0) {
    return Error{"DTRAIN_BACKEND=nccl but no CUDA device is usable on this host (" +
                 std::string(error == cudaSuccess ? "0 devices" : cudaGetErrorString(error)) +
                 "); use worker.backend: gloo"};
  }
  // DTRAIN_DEVICE names the physical slot the plan gave this rank (only_slots honoured);
  // cuda_ordinal maps it through CUDA_VISIBLE_DEVICES to the index CUDA uses here.
  auto env_value = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  int device = cuda_ordinal(env_value(contract::env::kDevice), env_value(contract::env::kCudaVisibleDevices),
                            topology.local_rank, devices);
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return Error{"cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(error)};
  }
  ncclUniqueId id;
  std::string id_key = kUniqueIdKey + group.store_key;
  if (group.index == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return Error{std::string("ncclGetUniqueId: ") + ncclGetErrorString(r)};
    }
    if (Status set = kv.set(id_key, to_hex(&id, sizeof(id))); !set) return set.error();
  } else {
    Result<std::vector<std::string>> value = kv.wait({id_key}, timeout);
    if (!value) return Error{"nccl rendezvous: " + value.error().message};
    if (!from_hex((*value)[0], &id, sizeof(id))) return Error{"nccl rendezvous: malformed unique id in the store"};
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  auto deadline = Clock::now() + timeout;
  ncclResult_t result = ncclCommInitRankConfig(&comm, group.size(), id, group.index, &config);
  std::string who = "rank " + std::to_string(topology.rank) +
                    (group.name.empty() ? "" : " in its " + group.name) + " (index " + std::to_string(group.index) +
                    " of " + std::to_string(group.size()) + ")";
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      ncclCommAbort(comm);
      return Error{"nccl init of " + who + " timed out after " + std::to_string(timeout.count()) +
                   "ms (a peer never joined)"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &result);
  }
  if (result != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return Error{"nccl init of " + who + ": " + ncclGetErrorString(result)};
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float* scratch = nullptr;
  cudaMalloc(&scratch, sizeof(float));
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(comm, stream, group, scratch, interrupts));
}

}  // namespace dtrain::worker

#else  // !DTRAIN_HAVE_CUDA

namespace dtrain::worker {

bool nccl_usable() { return false; }

Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient&, const CommGroup&, const Topology&, Millis,
                                                             std::shared_ptr<CommInterrupts>) {
  return Error{"DTRAIN_BACKEND=nccl, but this build has no CUDA/NCCL (configured without them); "
               "use worker.backend: gloo, or rebuild with -DDTRAIN_CUDA=ON"};
}

}  // namespace dtrain::worker

#endif
