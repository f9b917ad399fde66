#pragma once
// Factories of the Communicator back ends. Internal header.

#include <memory>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"

namespace dtrain::worker {

/// The ranks one communicator connects: the world, or one tensor-, pipeline- or data-parallel
/// group. Communicator ranks are indices into `ranks`; messages name global ranks.
struct CommGroup {
  std::string name;        ///< for messages: "" for the world, else "data-parallel group"...
  std::string store_key;   ///< rendezvous namespace in the store, unique per group
  std::vector<int> ranks;  ///< global ranks, by index in the group
  int index = 0;           ///< this rank's index
  int size() const { return static_cast<int>(ranks.size()); }
  int global_rank() const { return ranks.at(static_cast<size_t>(index)); }
};

/// Every rank of the job, rank r at index r.
CommGroup world_group(const Topology& topology);

/// "send/recv(800 bytes to rank 3, 808 bytes from rank 3)": global ranks, for messages.
std::string describe_send_recv(const CommGroup& group, size_t send_bytes, int send_to, size_t recv_bytes,
                               int recv_from);

/// A world of one: every collective is a no-op that succeeds; point to point has no peer.
std::unique_ptr<Communicator> make_solo_communicator();

/// Gloo over TCP, rendezvous through `kv`, listening on the address that routes to MASTER_ADDR.
Result<std::unique_ptr<Communicator>> make_gloo_communicator(KvClient& kv, const CommGroup& group,
                                                             const Settings& settings, Millis timeout);

/// True when this build has the NCCL back end and at least one CUDA device is visible.
bool nccl_usable();

/// NCCL (only in builds with CUDA; elsewhere an error saying so). Unique id through `kv`.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient& kv, const CommGroup& group,
                                                             const Topology& topology, Millis timeout);

}  // namespace dtrain::worker
