#pragma once
// How the supervisor reaches one host's agent. An interface so that tests can fake it
// (sim::FakeCluster: simulated agents for driver tests and dtrain-sim) and so that `local`
// (child process over pipes) and `ssh` (libssh2 channel) are interchangeable: the supervisor's one event loop polls every connection's fds
// and pumps them; no thread per host.

#include <poll.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"

namespace dtrain::transport {

/// A byte stream to one running `dtrain agent`.
class AgentConnection {
 public:
  virtual ~AgentConnection() = default;

  /// The fds (with events) to wait on before the next pump(). May change between calls.
  virtual std::vector<pollfd> poll_fds() const = 0;
  /// True for a connection that never has an fd (one carried inside another's frames): the
  /// driver's loop then leaves it out of each wait's list.
  virtual bool without_fds() const { return false; }

  /// Moves bytes: writes what is queued, reads what is available. Never blocks.
  virtual void pump() = 0;

  /// Queues bytes for the agent's stdin.
  virtual void send(std::string bytes) = 0;

  /// Bytes received from the agent's stdout since the last call.
  virtual std::string take_received() = 0;

  /// Text the agent wrote to stderr since the last call (diagnostics, for supervisor.log).
  virtual std::string take_diagnostics() = 0;

  /// True once the stream has ended (EOF, channel closed, process gone); see close_reason().
  virtual bool closed() const = 0;
  virtual std::string close_reason() const = 0;

  /// Closes the agent's stdin (the agent then fences: kills its workers and exits).
  virtual void close_input() = 0;

  /// Ends the connection for good: closes input, waits up to `grace_ms` for the agent to exit,
  /// then kills it (local) or tears the session down (ssh). Idempotent.
  virtual void shutdown(int grace_ms) = 0;

  /// The local agent's pid (local transport only).
  virtual std::optional<pid_t> local_pid() const = 0;

  /// The process on this machine that carries the connection (a local agent, the system's ssh),
  /// until it is reaped: a subreaper that reaps every child (a relaying agent) leaves it alone.
  virtual std::optional<pid_t> child_pid() const { return local_pid(); }

  /// True when pump() must run every ~100 ms even without an fd event (SSH: libssh2's own
  /// deadlines and keepalives; local: an agent that closed its output but lingers). False when
  /// fd readiness says everything, which spares a system call per host per pump at scale.
  virtual bool needs_periodic_pump() const { return true; }

  /// The address of this machine that the connection leaves from (ssh: getsockname of its TCP
  /// socket): one the far host has proven it can reach us at. "" when none (local, not yet
  /// connected).
  virtual std::string local_address() const { return ""; }

  /// "localhost (local agent pid 1234)" / "gpu01 (ssh root@10.0.0.2:22)" — for messages.
  virtual std::string describe() const = 0;
};

/// Where and how to start an agent.
struct AgentTarget {
  std::string host;          ///< as in the spec
  std::string user;          ///< ssh only
  int port = 22;             ///< ssh only
  std::string dtrain_path;   ///< binary to run as `<path> agent`; local: this executable
};

/// Starts agents. An interface so tests can fake it.
class Transport {
 public:
  virtual ~Transport() = default;
  /// Starts `dtrain agent` for `target`. Returns at once; the connection becomes usable when
  /// the agent's hello arrives (or closed() with a reason).
  virtual Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) = 0;
};

}  // namespace dtrain::transport
