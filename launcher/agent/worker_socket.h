#pragma once
// The agent's end of the worker protocol (worker/contract/wire.h): a unix socket in a 0700
// runtime directory, one connection per worker, newline-delimited JSON. Every line is parsed
// into a typed message (proto/worker_messages.h) at this boundary, once; the agent learns
// (gen, rank) from the hello and forwards the typed message to the supervisor, which answers
// through to_worker. A line that cannot be parsed is reported, not forwarded.

#include <poll.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/proto/worker_messages.h"

#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/base/runtime_directory.h"

namespace dtrain::agent {

/// Receives every valid message from a worker connection: the (gen, rank) of its hello, the
/// peer's pid as the kernel reports it, and the message itself (hello included).
using WorkerMessageSink = std::function<void(int gen, int rank, pid_t peer_pid, proto::WorkerMessage)>;

/// What the agent reports about a line it dropped: gen and rank are unknown before the hello;
/// `closed` when the connection was closed too (no hello first, or a line over the limit).
struct WorkerLineProblem {
  std::optional<int> gen;
  std::optional<int> rank;
  pid_t peer_pid = 0;
  std::string error;
  bool closed = false;
};
using WorkerProblemSink = std::function<void(const WorkerLineProblem&)>;

class WorkerSocketServer {
 public:
  /// Makes the supervisor's `runtime_dir` (base/runtime_directory.h: the whole path as given,
  /// every component checked; a refused one replaced by a fresh private directory for this run)
  /// and listens on `<dir>/<host>.sock`. Errors name the path and the fix (a bad run id, a path
  /// over 107 bytes, a socket in use by a live agent, no private directory possible at all).
  static Result<std::unique_ptr<WorkerSocketServer>> open(const std::string& runtime_dir,
                                                          const std::string& host,
                                                          std::string log_prefix);
  /// Closes every connection, removes the socket and, if it is then empty, the runtime dir.
  ~WorkerSocketServer();

  const std::string& path() const { return path_; }
  /// Why the supervisor's runtime_dir was not used (its owner, mode; and the path used instead),
  /// to be said once; empty when it was used.
  std::string runtime_dir_note() const;

  /// The listening socket and every connection; connections ask for input only when
  /// `accept_input` (the agent stops reading while its output backlog is large).
  std::vector<pollfd> poll_fds(bool accept_input) const;

  /// Handles readiness of one fd returned by poll_fds(). Never throws. A line that does not
  /// parse goes to `problems` and is dropped; the connection stays open unless its framing is
  /// lost (a line over the limit) or it never said hello.
  void on_ready(int fd, short revents, const WorkerMessageSink& sink, const WorkerProblemSink& problems);

  /// Accepts what waits, then reads what the connections of process `peer_pid` still hold, to
  /// the end of what the kernel buffers have, before the agent reports that process's exit: its last beat (its final
  /// step) was written before it exited, and must not reach the supervisor after the exit.
  void drain_connections_of(pid_t peer_pid, const WorkerMessageSink& sink, const WorkerProblemSink& problems);

  /// Queues one line for the newest connection whose hello said (gen, rank): a to_worker
  /// frame's msg, relayed as the supervisor wrote it.
  Status send_to(int gen, int rank, const nlohmann::json& message);

  /// gen_changed (in-place recovery): the worker of `rank` whose process group is
  /// `worker_group` now belongs to generation `to`. Every open connection whose hello said
  /// (from, rank) is re-stamped (its messages go to the sink as `to`, send_to(to, rank) reaches
  /// it) and told with a gen.changed line. A hello of (from, rank) arriving later is re-stamped
  /// and told too, but only when it comes from that worker's process group (the worker itself,
  /// connecting late or again): any other process saying the old (from, rank) keeps it, so it
  /// cannot take the replies meant for the worker. Returns the number of connections told.
  size_t change_generation(int from, int to, int rank, pid_t worker_group);

  /// The worker whose process group is `worker_group` was reaped: its moves are forgotten (its
  /// pid, and so a group of that number, may come back as someone else's).
  void forget_moves_of(pid_t worker_group);

  /// Warm standbys (messages.h spawn.standby): whether a process of the group `standby` (the
  /// standby's pid) has connected and said hello {standby:true}, and waits for its assign.
  bool standby_ready(pid_t standby) const;
  /// Sends `assign` (wire.h) on that connection; from then on the connection is like a fresh
  /// one: its next line must be the worker's hello {rank, gen, pid}.
  Status assign_standby(pid_t standby, const proto::StandbyAssign& assign);

 private:
  struct Connection {
    UniqueFd fd;
    pid_t peer_pid = 0;
    std::string input;
    std::string output;
    std::optional<int> gen;
    std::optional<int> rank;
    bool standby = false;  ///< said hello {standby:true}; waits for assign (no gen, no rank)
    uint64_t serial = 0;  // newer connections win when two claim the same (gen, rank)
  };

  WorkerSocketServer(RuntimeDirectoryChoice runtime_dir, std::string path, UniqueFd listener,
                     std::string log_prefix);
  void accept_all();
  void read_from(Connection& connection, const WorkerMessageSink& sink, const WorkerProblemSink& problems);
  bool handle_line(Connection& connection, std::string_view line, const WorkerMessageSink& sink,
                   const WorkerProblemSink& problems);
  /// Reports a problem with a line of `connection` and, when `close`, drops the connection.
  void report(Connection& connection, const WorkerProblemSink& problems, std::string error, bool close);
  void write_to(Connection& connection);
  /// Re-stamps `connection` to `gen` and queues the gen.changed line for it.
  void tell_generation(Connection& connection, int gen);
  /// The generation a hello of (gen, rank) from `peer_pid` belongs to now: `gen`, unless
  /// change_generation() moved that worker on and the peer is in its process group.
  int current_generation(int gen, int rank, pid_t peer_pid) const;
  void drop(int fd, const std::string& why);
  static bool is_standby_of(const Connection& connection, pid_t standby);
  Connection* standby_connection(pid_t standby);

  RuntimeDirectoryChoice runtime_dir_;
  std::string path_;
  UniqueFd listener_;
  std::string log_prefix_;
  std::map<int, Connection> connections_;  // by fd
  struct Move {
    int to;
    pid_t worker_group;
  };
  std::map<std::pair<int, int>, Move> moves_;  // (from gen, rank) → where change_generation moved it
  uint64_t next_serial_ = 1;
};

}  // namespace dtrain::agent
