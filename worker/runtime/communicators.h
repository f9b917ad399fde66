#pragma once
// Factories of the Communicator back ends. Internal header.

#include <functional>
#include <memory>
#include <mutex>
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

/// The live communicators of this process, as another thread may reach them: when the agent
/// announces a newer generation (gen.changed: an in-place recovery has begun), every collective
/// still waiting in a communicator of the old one must end now, not at its timeout. A survivor
/// can be blocked in a collective with live peers that themselves wait for the dead rank, or on
/// a send Gloo queued on a socket that broke (Gloo fails such a wait only at the op's timeout:
/// gloo_communicator.cpp, InFlight); without this it would miss the in-place deadline and force
/// a full restart.
/// Thread-safe: the registry's mutex is held while an interrupt runs and while a communicator
/// unregisters, so none runs on a communicator that is being destroyed.
class CommInterrupts {
 public:
  using Interrupt = std::function<void(const std::string& why)>;

  /// Unregisters when destroyed: a communicator destroys it before its own resources.
  class Registration {
   public:
    Registration(std::shared_ptr<CommInterrupts> registry, uint64_t id) : registry_(std::move(registry)), id_(id) {}
    ~Registration() { registry_->remove(id_); }
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    std::shared_ptr<CommInterrupts> registry_;
    uint64_t id_;
  };

  static std::unique_ptr<Registration> add(const std::shared_ptr<CommInterrupts>& registry, Interrupt interrupt) {
    std::lock_guard lock(registry->mutex_);
    uint64_t id = registry->next_id_++;
    registry->interrupts_.emplace_back(id, std::move(interrupt));
    return std::make_unique<Registration>(registry, id);
  }

  /// Runs every registered interrupt (from any thread).
  void interrupt_all(const std::string& why) {
    std::lock_guard lock(mutex_);
    for (auto& [id, interrupt] : interrupts_) interrupt(why);
  }

 private:
  void remove(uint64_t id) {
    std::lock_guard lock(mutex_);
    std::erase_if(interrupts_, [&](const auto& entry) { return entry.first == id; });
  }

  std::mutex mutex_;
  uint64_t next_id_ = 1;
  std::vector<std::pair<uint64_t, Interrupt>> interrupts_;
};

/// Every rank of the job, rank r at index r.
CommGroup world_group(const Topology& topology);

/// "send/recv(800 bytes to rank 3, 808 bytes from rank 3)": global ranks, for messages.
std::string describe_send_recv(const CommGroup& group, size_t send_bytes, int send_to, size_t recv_bytes,
                               int recv_from);

/// A world of one: every collective is a no-op that succeeds; point to point has no peer.
std::unique_ptr<Communicator> make_solo_communicator();

/// Gloo over TCP, rendezvous through `kv`, listening on the address that routes to MASTER_ADDR.
/// Registers with `interrupts` (may be null): an interrupt aborts the waits of the collective
/// in flight.
Result<std::unique_ptr<Communicator>> make_gloo_communicator(KvClient& kv, const CommGroup& group,
                                                             const Settings& settings, Millis timeout,
                                                             std::shared_ptr<CommInterrupts> interrupts = nullptr);

/// True when this build has the NCCL back end and at least one CUDA device is visible.
bool nccl_usable();

/// NCCL (only in builds with CUDA; elsewhere an error saying so). Unique id through `kv`.
/// Registers with `interrupts` (may be null): an interrupt makes the wait of the collective in
/// flight abort the communicator (ncclCommAbort, from the waiting thread).
Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient& kv, const CommGroup& group,
                                                             const Topology& topology, Millis timeout,
                                                             std::shared_ptr<CommInterrupts> interrupts = nullptr);

}  // namespace dtrain::worker
