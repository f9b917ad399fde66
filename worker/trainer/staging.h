#pragma once
// Runs the trainer's collectives on host buffers whatever the back end: Gloo works on host
// memory directly; NCCL needs device memory, so buffers are staged through the GPU.

#include <cstddef>
#include <memory>

#include "worker/runtime/worker.h"

namespace dtrain::trainer {

class Staging {
 public:
  /// `max_bytes`: the largest buffer any collective, or either half of a send/recv, will be given.
  static worker::Result<std::unique_ptr<Staging>> create(worker::Communicator& comm, size_t max_bytes);
  ~Staging();
  /// The most device memory this process's stagings have held at once, in bytes: the trainer's
  /// own peak accelerator memory (NCCL's internal buffers are not counted); 0 without a GPU.
  static size_t peak_device_bytes();

  worker::Status allreduce_sum(double* host, size_t count, worker::Millis timeout);
  worker::Status broadcast(void* host, size_t bytes, int root, worker::Millis timeout);
  /// Communicator::send_recv on host buffers (worker::Communicator::kNoPeer skips a half).
  worker::Status send_recv(const double* send, size_t send_count, int send_to, double* recv, size_t recv_count,
                           int recv_from, worker::Millis timeout);

 private:
  Staging(worker::Communicator& comm, void* device, size_t max_bytes)
      : comm_(comm), device_(device), max_bytes_(max_bytes) {}
  worker::Communicator& comm_;
  void* device_;  // null: the back end takes host memory; else 2 x max_bytes (send, receive)
  size_t max_bytes_;
};

}  // namespace dtrain::trainer
