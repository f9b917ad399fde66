#pragma once
// The worker's end of the worker ⇄ agent socket (worker/contract/wire.h): newline-delimited
// JSON. A reader thread matches replies to requests by id, so the training loop (beats), the
// Gloo rendezvous and a background checkpoint can all use one connection. Internal header.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "worker/runtime/worker.h"

namespace dtrain::worker {

class AgentConnection {
 public:
  /// Connects to the agent's unix socket at `path`.
  static Result<std::shared_ptr<AgentConnection>> connect(const std::string& path);
  ~AgentConnection();

  /// Sends one message (no reply expected). Errors when the agent has gone.
  Status send(const nlohmann::json& message);
  /// Sends one already-serialised line (without the newline).
  Status send_line(std::string line);

  /// Sends `message` with a fresh "id" and waits up to `timeout` for the reply with that id.
  /// An {"type":"error"} reply becomes an Error carrying the agent's text.
  Result<nlohmann::json> request(nlohmann::json message, Millis timeout);

  /// ckpt.request (wire.h): the supervisor asked for a checkpoint at step S (Slurm's time limit
  /// is near). Returns its reason once, at the first call with `step` >= S; nullopt otherwise.
  /// Cheap (a mutex, no I/O): call it every step.
  std::optional<std::string> take_checkpoint_request(int64_t step);
  /// A checkpoint was saved at `step` for a request (maybe one another rank heard first): a
  /// request for that step or an earlier one, arriving late here, is served already.
  void checkpoint_request_served(int64_t step);

  /// gen.changed (wire.h): the newest generation the agent announced, if any. Cheap. When it
  /// arrives, every request still waiting for its reply is abandoned (an error saying so): the
  /// agent stamps requests with the new generation from then on, so a kv.wait that reached it
  /// after the change would wait in the new generation's store for keys of the old one.
  std::optional<int> announced_generation();
  /// Waits up to `timeout` for an announcement of a generation newer than `after` and returns
  /// it; an error when none came in time or the agent closed the connection.
  Result<int> wait_for_generation_after(int after, Millis timeout);
  /// Called on the connection's reader thread with each gen.changed's generation, after
  /// announced_generation() returns it. Must not block (nor call back into this connection).
  void on_generation_announced(std::function<void(int)> callback);

  /// A warm standby (DTRAIN_STANDBY=1) that said hello {standby:true}: waits, without a time
  /// limit (the agent decides how long a standby lives, and it dies with the agent), for the
  /// agent's assign {gen, rank, env} (wire.h) and returns it; an error when the connection closed.
  Result<nlohmann::json> wait_for_assignment();

 private:
  explicit AgentConnection(int fd, std::string path);
  void read_loop();
  void close_with(std::string reason);
  void note_checkpoint_request(const nlohmann::json& request);
  void note_generation_change(const nlohmann::json& change);

  int fd_;
  std::string path_;
  std::mutex write_mutex_;
  std::mutex mutex_;
  std::condition_variable replied_;
  std::set<int64_t> waiting_;
  std::set<int64_t> abandoned_;  // waiting when gen.changed came: answered with an error
  std::map<int64_t, nlohmann::json> replies_;
  int64_t next_id_ = 1;
  bool closed_ = false;
  std::string closed_reason_;
  std::optional<int64_t> requested_checkpoint_step_;  // ckpt.request pending: save at this step
  int64_t served_checkpoint_step_ = -1;  // requests up to this step are served (checkpoint_request_served)
  std::string requested_checkpoint_reason_;
  std::optional<int> announced_generation_;  // gen.changed: the newest generation announced
  std::function<void(int)> on_generation_announced_;
  std::optional<nlohmann::json> assignment_;  // assign, for a standby
  std::thread reader_;
};

/// KvClient over the agent connection; the supervisor answers.
class AgentKv final : public KvClient {
 public:
  /// `generation`: the worker's generation (DTRAIN_GENERATION), which gen.check compares with
  /// the store's: after gen.changed the agent stamps this worker's requests with the new
  /// generation, so "current" alone would let a save begun in the old one commit.
  AgentKv(std::shared_ptr<AgentConnection> connection, int generation)
      : connection_(std::move(connection)), generation_(generation) {}
  /// The worker adopted `generation` (Worker::adopt_new_generation).
  void set_generation(int generation) { generation_ = generation; }
  Status set(const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> get(const std::string& key) override;
  Result<std::vector<std::string>> wait(const std::vector<std::string>& keys, Millis timeout) override;
  /// Current only when the store's generation is the one this worker is in (gen.ok's
  /// "generation"; a reply without it is taken at its "current").
  Result<bool> generation_is_current() override;

 private:
  /// An error when the agent announced a generation this worker has not adopted: its store is
  /// not this worker's any more (kv requests would be served in the new generation's).
  Status check_generation(const std::string& what) const;

  std::shared_ptr<AgentConnection> connection_;
  std::atomic<int> generation_;
};

}  // namespace dtrain::worker
