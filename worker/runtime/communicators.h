#pragma once
// Factories of the Communicator back ends. Internal header.

#include <memory>

#include "worker/runtime/worker.h"

namespace dtrain::worker {

/// A world of one: every collective is a no-op that succeeds.
std::unique_ptr<Communicator> make_solo_communicator();

/// Gloo over TCP, rendezvous through `kv`, listening on the address that routes to MASTER_ADDR.
Result<std::unique_ptr<Communicator>> make_gloo_communicator(KvClient& kv, const Topology& topology,
                                                             const Settings& settings, Millis timeout);

/// True when this build has the NCCL back end and at least one CUDA device is visible.
bool nccl_usable();

/// NCCL (only in builds with CUDA; elsewhere an error saying so). Unique id through `kv`.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient& kv, const Topology& topology,
                                                             const Settings& settings, Millis timeout);

}  // namespace dtrain::worker
