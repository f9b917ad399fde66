#include "worker/trainer/staging.h"

#include <atomic>
#include <cstring>
#include <string>

#if DTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dtrain::trainer {

namespace {
// Device bytes held by every Staging of the process, now and at most (stagings are made and
// freed on the training thread, but the counters cost nothing to make safe).
[[maybe_unused]] std::atomic<size_t> device_bytes_now{0};
std::atomic<size_t> device_bytes_peak{0};
}  // namespace

size_t Staging::peak_device_bytes() { return device_bytes_peak.load(); }

worker::Result<std::unique_ptr<Staging>> Staging::create(worker::Communicator& comm, size_t max_bytes) {
  void* device = nullptr;
  if (std::string(comm.backend()) == "nccl") {
#if DTRAIN_HAVE_CUDA
    if (cudaError_t error = cudaMalloc(&device, 2 * max_bytes); error != cudaSuccess) {
      return worker::Error{"cudaMalloc(" + std::to_string(2 * max_bytes) + "): " + cudaGetErrorString(error)};
    }
    size_t now = device_bytes_now += 2 * max_bytes;
    for (size_t peak = device_bytes_peak.load(); now > peak && !device_bytes_peak.compare_exchange_weak(peak, now);) {
    }
#else
    (void)max_bytes;
    return worker::Error{"internal bug: an NCCL communicator in a build without CUDA"};
#endif
  }
  return std::unique_ptr<Staging>(new Staging(comm, device, max_bytes));
}

Staging::~Staging() {
#if DTRAIN_HAVE_CUDA
  if (device_ != nullptr) {
    cudaFree(device_);
    device_bytes_now -= 2 * max_bytes_;
  }
#endif
}

worker::Status Staging::allreduce_sum(double* host, size_t count, worker::Millis timeout) {
  if (device_ == nullptr) return comm_.allreduce_sum(host, count, timeout);
#if DTRAIN_HAVE_CUDA
  size_t bytes = count * sizeof(double);
  if (cudaError_t e = cudaMemcpy(device_, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return worker::Error{std::string("cudaMemcpy to device: ") + cudaGetErrorString(e)};
  }
  if (auto reduced = comm_.allreduce_sum(static_cast<double*>(device_), count, timeout); !reduced) return reduced;
  if (cudaError_t e = cudaMemcpy(host, device_, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return worker::Error{std::string("cudaMemcpy to host: ") + cudaGetErrorString(e)};
  }
#endif
  return {};
}

worker::Status Staging::broadcast(void* host, size_t bytes, int root, worker::Millis timeout) {
  if (device_ == nullptr) return comm_.broadcast(host, bytes, root, timeout);
#if DTRAIN_HAVE_CUDA
  if (cudaError_t e = cudaMemcpy(device_, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return worker::Error{std::string("cudaMemcpy to device: ") + cudaGetErrorString(e)};
  }
  if (auto sent = comm_.broadcast(device_, bytes, root, timeout); !sent) return sent;
  if (cudaError_t e = cudaMemcpy(host, device_, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return worker::Error{std::string("cudaMemcpy to host: ") + cudaGetErrorString(e)};
  }
#endif
  return {};
}

worker::Status Staging::send_recv(const double* send, size_t send_count, int send_to, double* recv, size_t recv_count,
                                  int recv_from, worker::Millis timeout) {
  size_t send_bytes = send_count * sizeof(double), recv_bytes = recv_count * sizeof(double);
  if (device_ == nullptr) return comm_.send_recv(send, send_bytes, send_to, recv, recv_bytes, recv_from, timeout);
#if DTRAIN_HAVE_CUDA
  char* device_send = static_cast<char*>(device_);
  char* device_recv = device_send + max_bytes_;
  if (send_to != worker::Communicator::kNoPeer) {
    if (cudaError_t e = cudaMemcpy(device_send, send, send_bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
      return worker::Error{std::string("cudaMemcpy to device: ") + cudaGetErrorString(e)};
    }
  }
  if (auto done = comm_.send_recv(device_send, send_bytes, send_to, device_recv, recv_bytes, recv_from, timeout); !done) {
    return done;
  }
  if (recv_from != worker::Communicator::kNoPeer) {
    if (cudaError_t e = cudaMemcpy(recv, device_recv, recv_bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
      return worker::Error{std::string("cudaMemcpy to host: ") + cudaGetErrorString(e)};
    }
  }
#endif
  return {};
}

}  // namespace dtrain::trainer
