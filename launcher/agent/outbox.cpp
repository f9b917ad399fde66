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
  if (written_ > 0 && written_ >= queue_.size() / 2) {
    queue_.erase(0, written_);
    written_ = 0;
  }
  Result<std::string> frame = proto::encode_frame_checked(proto::to_json(message));
  if (!frame) {
    // The supervisor's decoder would refuse it and lose the stream: say so in a frame that fits.
    std::fprintf(stderr, "agent: %s\n", frame.error().message.c_str());
    frame = proto::encode_frame(proto::to_json(proto::AgentError{frame.error().message, proto::type_of(message)}));
  }
  queue_ += *frame;
}

void Outbox::flush_some() {
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
    written_ = 0;
  }
}

void Outbox::flush_until(int64_t deadline_ms) {
  SystemClock clock;
  for (;;) {
    flush_some();
    if (broken_ || pending_bytes() == 0) return;
    int64_t left = deadline_ms - clock.monotonic_ms();
    if (left <= 0) return;
    pollfd entry{fd_, POLLOUT, 0};
    ::poll(&entry, 1, static_cast<int>(left));
  }
}

}  // namespace dtrain::agent
