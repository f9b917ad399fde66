#include "launcher/agent/outbox.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/proto/frame.h"

namespace dtrain::agent {

Outbox::Outbox(int fd) : fd_(fd) {
  if (Status status = set_nonblocking(fd); !status) {
    std::fprintf(stderr, "agent: output: %s\n", status.error().message.c_str());
  }
}

void Outbox::send(const proto::AgentMessage& message) {
  if (broken_) return;
  if (written_ > 0 && written_ >= queue_.size() / 2) drop_written();
  Result<std::string> frame = proto::encode_frame_checked(proto::to_json(message));
  if (!frame) {
    // The supervisor's decoder would refuse it and lose the stream: say so in a frame that fits.
    std::fprintf(stderr, "agent: %s\n", frame.error().message.c_str());
    frame = proto::encode_frame(proto::to_json(proto::AgentError{frame.error().message, proto::type_of(message)}));
  }
  queue_ += *frame;
  frame_ends_.push_back(queue_.size());
}

void Outbox::drop_written() {
  queue_.erase(0, written_);
  for (size_t& end : frame_ends_) end = end > written_ ? end - written_ : 0;
  while (!frame_ends_.empty() && frame_ends_.front() == 0) frame_ends_.pop_front();
  written_ = 0;
}

void Outbox::detach() {
  fd_ = -1;
  broken_ = false;  // queueing goes on for the next channel
}

void Outbox::rebind(int fd, const proto::AgentMessage& first) {
  // Skip to the first frame the old channel took nothing of.
  size_t start = 0;
  while (!frame_ends_.empty() && frame_ends_.front() <= written_) {
    start = frame_ends_.front();
    frame_ends_.pop_front();
  }
  if (written_ > start && !frame_ends_.empty()) {  // the old channel took part of this one
    start = frame_ends_.front();
    frame_ends_.pop_front();
  }
  written_ = start;
  drop_written();
  std::string queued = std::move(queue_);
  std::deque<size_t> ends = std::move(frame_ends_);
  queue_.clear();
  frame_ends_.clear();
  fd_ = fd;
  broken_ = false;
  if (Status status = set_nonblocking(fd); !status) {
    std::fprintf(stderr, "agent: output: %s\n", status.error().message.c_str());
  }
  send(first);
  size_t offset = queue_.size();
  queue_ += queued;
  for (size_t end : ends) frame_ends_.push_back(end + offset);
}

void Outbox::flush_some() {
  if (fd_ < 0) return;  // detached: kept for the next channel
  while (!broken_ && pending_bytes() > 0) {
    ssize_t n = ::write(fd_, queue_.data() + written_, pending_bytes());
    if (n > 0) {
      written_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    broken_ = true;  // EPIPE and friends: the supervisor is gone; the loop fences on it
  }
  if (pending_bytes() == 0) {
    queue_.clear();
    frame_ends_.clear();
    written_ = 0;
  }
}

void Outbox::flush_until(int64_t deadline_ms) {
  SystemClock clock;
  for (;;) {
    flush_some();
    if (broken_ || fd_ < 0 || pending_bytes() == 0) return;
    int64_t left = deadline_ms - clock.monotonic_ms();
    if (left <= 0) return;
    pollfd entry{fd_, POLLOUT, 0};
    ::poll(&entry, 1, static_cast<int>(left));
  }
}

}  // namespace dtrain::agent
