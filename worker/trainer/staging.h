#pragma once
// Runs the trainer's collectives on host buffers whatever the back end: Gloo works on host
// memory directly; NCCL needs device memory, so buffers are staged through the GPU.

#include <cstddef>
#include <memory>

#include "worker/runtime/worker.h"

namespace dtrain::trainer {

class Staging {
 public:
  /// `max_bytes`: the largest buffer any collective will be given.
  static worker::Result<std::unique_ptr<Staging>> create(worker::Communicator& comm, size_t max_bytes);
  ~Staging();

  worker::Status allreduce_sum(double* host, size_t count, worker::Millis timeout);
  worker::Status broadcast(void* host, size_t bytes, int root, worker::Millis timeout);

 private:
  Staging(worker::Communicator& comm, void* device) : comm_(comm), device_(device) {}
  worker::Communicator& comm_;
  void* device_;  // null: the back end takes host memory
};

}  // namespace dtrain::trainer
