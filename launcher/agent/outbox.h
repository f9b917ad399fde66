#pragma once
// Frames waiting to go to the supervisor. The output fd is non-blocking so that a slow reader
// never stalls the agent's loop; instead the loop stops reading worker output while the backlog
// is large (backpressure reaches the workers through their pipes, not the agent's memory).

#include <cstdint>
#include <deque>
#include <string>

#include "launcher/proto/agent_messages.h"

namespace dtrain::agent {

class Outbox {
 public:
  /// `fd` is set non-blocking.
  explicit Outbox(int fd);

  /// Queues one message as a frame. Dropped silently once the channel is broken. A message
  /// over proto::kMaxFrameBytes is replaced by an error frame naming it (about: its type).
  void send(const proto::AgentMessage& message);

  /// Writes as much as the fd takes now.
  void flush_some();

  /// Tries to write everything until `deadline_ms` (monotonic), for the last words before exit.
  void flush_until(int64_t deadline_ms);

  /// The channel ended (re-attachable agents, messages.h config.reattach_ms): nothing is written
  /// until rebind(); send() goes on queueing.
  void detach();
  /// A new channel: `first` goes out first, then every queued frame that nothing of was written
  /// to the old one. A frame the old channel took part of is dropped (the new stream must start
  /// at a frame's first byte); those it took whole are gone with it.
  void rebind(int fd, const proto::AgentMessage& first);
  bool detached() const { return fd_ < 0; }

  size_t pending_bytes() const { return queue_.size() - written_; }
  bool broken() const { return broken_; }
  int fd() const { return fd_; }

  /// Above this backlog the agent stops reading worker output and worker sockets.
  static constexpr size_t kBacklogLimit = 4 << 20;

 private:
  void drop_written();

  int fd_;
  std::string queue_;
  std::deque<size_t> frame_ends_;  ///< where each frame in queue_ ends (offsets into queue_)
  size_t written_ = 0;
  bool broken_ = false;
};

}  // namespace dtrain::agent
