#include "worker/trainer/staging.h"

#include <cstring>
#include <string>

#if DTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dtrain::trainer {

worker::Result<std::unique_ptr<Staging>> Staging::create(worker::Communicator& comm, size_t max_bytes) {
  void* device = nullptr;
  if (std::string(comm.backend()) == "nccl") {
#if DTRAIN_HAVE_CUDA
    if (cudaError_t error = cudaMalloc(&device, max_bytes); error != cudaSuccess) {
      return worker::Error{"cudaMalloc(" + std::to_string(max_bytes) + "): " + cudaGetErrorString(error)};
    }
#else
    (void)max_bytes;
    return worker::Error{"internal bug: an NCCL communicator in a build without CUDA"};
#endif
  }
  return std::unique_ptr<Staging>(new Staging(comm, device));
}

Staging::~Staging() {
#if DTRAIN_HAVE_CUDA
  if (device_ != nullptr) cudaFree(device_);
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

}  // namespace dtrain::trainer
