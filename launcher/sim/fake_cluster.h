#pragma once
// FakeCluster: simulated agents in this process, reached through its transport(), for driver tests and `dtrain-sim`. Each host's
// agent is a state machine on one background thread that speaks the real agent protocol
// (proto/messages.h, length-prefixed JSON frames) over a socketpair, so the driver reads, decodes
// and parses exactly what it would from `dtrain agent` — only the processes are missing. Its
// workers are simulated too: they start at once, say hello, beat with a rising step every
// heartbeat interval, and exit when told (finish_all) or killed.
//
// Faults are injected from any thread and act on the simulation thread:
//   kill_host       the agent and its workers vanish (the connection closes: EOF at once)
//   partition_host  the agent goes silent both ways (the driver must notice by heartbeats)
//   crash_rank      a worker exits with a code
//   hang_rank       a worker stops beating (alive, as a SIGSTOPped one; the agent reports 'T')
//   set_saving      a worker is in a checkpoint save (phase "checkpoint", no step progress)
//
// Relays (scale.tree; the driver builds a tree over this transport when DriverSeams says so): a
// simulated agent answers relay_open by starting the named hosts' agents itself, carries their
// frames in relay_to / relay_from as the real relay does, and reports relay_closed when one ends.
// When a relay is killed, its hosts' agents that were configured with reattach_ms keep their
// workers and wait; an attach (a fresh agent's first frame) naming one of them takes it over.
//
// One thread serves every host: 2,048 hosts × 8 ranks beating once a second is ~18,000 frames a
// second, which one thread writes easily; the driver's share of the CPU is the process's minus
// simulation_cpu_seconds().

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launcher/base/clock.h"
#include "launcher/transport/transport.h"

namespace dtrain::sim {

struct FakeClusterOptions {
  int gpus_per_host = 8;           ///< hello.facts.gpus of every simulated host
  int64_t step_ms = 1000;          ///< simulated time per training step (step_ms in beats)
  /// How long a simulated agent takes to answer a spawn with `started` (fork + exec).
  int64_t spawn_delay_ms = 0;
  /// The simulation's time (not owned): the driver's ScaledClock in tests of long timeouts.
  /// Null: the system clock.
  const Clock* clock = nullptr;
  /// Modelled cost of one SSH session (connect, key exchange, authentication, the agent's start):
  /// an agent reads nothing before its session is up. The sessions one initiator opens (the
  /// driver its hosts or relays, a relay its hosts) run at most `max_parallel` at a time, as the
  /// SSH transports do (ssh.max_parallel; a relay uses relay_open's).
  int64_t ssh_setup_ms = 0;
  int max_parallel = 64;
};

class FakeCluster {
 public:
  explicit FakeCluster(FakeClusterOptions options = {});
  ~FakeCluster();  ///< stops the simulation thread; open connections see EOF
  FakeCluster(const FakeCluster&) = delete;
  FakeCluster& operator=(const FakeCluster&) = delete;

  /// The transport that starts this cluster's agents (one per AgentTarget::host).
  transport::Transport& transport();

  void kill_host(const std::string& host);
  void partition_host(const std::string& host);
  /// `rank` is the global rank of the current generation; exits with `code`.
  void crash_rank(int rank, int code);
  void hang_rank(int rank);
  /// A worker begins (true) or ends (false) a checkpoint save: while saving it beats with phase
  /// "checkpoint" and its step does not advance, as a rank in torch.save does.
  void set_saving(int rank, bool saving);
  /// Every live worker exits 0 (the job is done), and so does any worker spawned after (its
  /// spawn was still on its way through a relay).
  void finish_all();

  /// The newest step any worker of the newest generation has beaten (0 before the first beat).
  int64_t newest_step() const;
  /// The newest generation any agent was asked to spawn (-1 before the first spawn).
  int newest_generation() const;
  /// CPU time the simulation thread has used (CLOCK_THREAD_CPUTIME_ID), in seconds.
  double simulation_cpu_seconds() const;
  /// Agents that fenced themselves because the driver was silent for heartbeat.timeout (as a
  /// real agent does): a driver that keeps its pings going leaves this at 0.
  int silence_fences() const;
  /// The longest gap between two of the driver's frames to any one agent, in ms.
  int64_t longest_driver_silence_ms() const;
  /// Frames the simulated agents have sent and received.
  int64_t frames_sent() const;
  int64_t frames_received() const;
  /// relay_batch frames the simulated relays have sent, and the beats and pongs in them.
  int64_t relay_batches() const;
  int64_t relay_batched_messages() const;
  /// `relay` sends a relay_batch with a pong of `host`, which it does not carry (a confused
  /// relay: the driver must refuse it, not route it).
  void forge_relayed_pong(const std::string& relay, const std::string& host);

  struct Simulation;  ///< the simulation thread's state (fake_cluster.cpp)

 private:
  std::unique_ptr<Simulation> simulation_;
  std::unique_ptr<transport::Transport> transport_;
};

}  // namespace dtrain::sim
