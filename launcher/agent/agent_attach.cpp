// Re-attaching (proto/messages.h: config.reattach_ms, attach, reattached). A host reached through
// a relay loses its channel when the relay is lost, through no fault of its own: its agent keeps
// its workers, listens on a private unix socket and waits up to reattach_ms for the supervisor to
// reach it another way (a fresh `dtrain agent` whose first frame is attach: attach_pipe.h). Only
// when nothing comes does it fence, as it would have at once. docs/architecture.md §1 "Relays".

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "launcher/agent/agent_loop.h"
#include "launcher/agent/attach_pipe.h"
#include "launcher/base/duration.h"
#include "launcher/base/fd.h"

namespace dtrain::agent::detail {

namespace {

/// "<dir>/<host>.sock" → "<dir>/<host>.attach": next to the worker socket, in the same private
/// runtime directory.
std::string attach_path_for(const std::string& worker_socket) {
  std::string base = worker_socket;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".sock") == 0) base.resize(base.size() - 5);
  return base + ".attach";
}

}  // namespace

std::string Agent::open_attach_socket(int64_t reattach_ms) {
  std::string path = attach_path_for(sockets_->path());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::string problem;
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (path.size() >= sizeof address.sun_path) {
    problem = "its path '" + path + "' is too long for a unix socket";
  } else if (!listener.valid()) {
    problem = "socket(AF_UNIX): " + errno_text(errno);
  } else {
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    ::unlink(path.c_str());  // ours: a stale one of this run and host, in our private directory
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      problem = "bind '" + path + "': " + errno_text(errno);
    } else if (::chmod(path.c_str(), 0600) != 0 || ::listen(listener.get(), 4) != 0) {
      problem = "listen '" + path + "': " + errno_text(errno);
    }
  }
  if (!problem.empty()) {
    // The run goes on; this host only cannot outlive its relay.
    return "no re-attach socket (" + problem + "): if its relay is lost, this host is lost with it";
  }
  attach_listener_ = std::move(listener);
  attach_path_ = path;
  reattach_ms_ = reattach_ms;
  parent_at_start_ = ::getppid();
  return "";
}

void Agent::close_attach_socket() {
  if (!attach_listener_.valid()) return;
  attach_listener_.reset();
  ::unlink(attach_path_.c_str());
}

void Agent::channel_ended(std::string reason, ExitCode code) {
  if (fence_reason_) return;
  if (!reattachable()) return begin_fence(std::move(reason), code);
  if (detached_since_ms_) return;
  detached_since_ms_ = now_ms();
  detach_reason_ = reason;
  release_channel();
  std::fprintf(stderr, "%s: %s; keeping %zu worker%s, waiting up to %s for a re-attach at %s\n", who().c_str(),
               reason.c_str(), workers_.size(), workers_.size() == 1 ? "" : "s",
               format_duration(Millis(reattach_ms_)).c_str(), attach_path_.c_str());
}

void Agent::release_channel() {
  input_open_ = false;
  held_beats_.clear();  // beats are news only while they are fresh
  int old_output = out_.fd();
  out_.detach();
  if (channel_.valid()) {
    channel_.reset();  // a re-attach's socket: the pipe process at its other end then exits
    return;
  }
  // The first session's pipes: /dev/null in their place, so that the fds stay taken and sshd
  // sees them closed.
  if (Status redirected = redirect_to_dev_null({input_fd_, old_output}); !redirected) {
    std::fprintf(stderr, "%s: %s\n", who().c_str(), redirected.error().message.c_str());
  }
}

void Agent::accept_attach() {
  UniqueFd connection(::accept4(attach_listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!connection.valid()) return;
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::geteuid()) {
    std::fprintf(stderr, "%s: refused a re-attach from uid %d (not this agent's user)\n", who().c_str(),
                 static_cast<int>(peer.uid));
    return;
  }
  if (fence_reason_) return;  // fencing: nothing is left to attach to
  int64_t now = now_ms();
  proto::ReattachedReport report;
  report.host = config_->host;
  report.pid = ::getpid();
  if (detached_since_ms_) {
    report.detached_ms = now - *detached_since_ms_;
    report.reason = detach_reason_;
  } else {
    // The supervisor gave the old channel up before this agent noticed (a partition): a newer
    // channel replaces it.
    report.reason = "replaced by a re-attach while the old channel was still open";
    release_channel();
  }
  for (const auto& [pid, worker] : workers_) {
    if (!worker->standby()) report.workers.push_back({worker->gen(), worker->rank(), pid});
  }
  for (const auto& [key, exit] : recent_exits_) report.exits.push_back(exit);
  channel_ = std::move(connection);
  input_fd_ = channel_.get();
  input_open_ = true;
  decoder_ = proto::FrameDecoder{};
  out_.rebind(channel_.get(), report);
  detached_since_ms_.reset();
  last_frame_ms_ = now;
  next_beat_ms_ = now + config_->heartbeat_interval_ms;
  std::fprintf(stderr, "%s: re-attached after %lld ms (%s); %zu worker%s kept\n", who().c_str(),
               static_cast<long long>(report.detached_ms), report.reason.c_str(), report.workers.size(),
               report.workers.size() == 1 ? "" : "s");
}

void Agent::check_detached(int64_t now) {
  if (now - *detached_since_ms_ < reattach_ms_) return;
  begin_fence(detach_reason_ + ", and nothing re-attached within " + format_duration(Millis(reattach_ms_)),
              ExitCode::infra);
}

bool Agent::parent_gone_once() {
  if (!reattachable() || parent_death_seen_ || ::getppid() == parent_at_start_) return false;
  parent_death_seen_ = true;
  return true;
}

void Agent::remember_exit(const proto::WorkerExitReport& exit) {
  if (!reattachable()) return;
  recent_exits_[{exit.gen, exit.rank}] = exit;
  // The generations a supervisor may still wait on: the newest and the one before it.
  int newest = recent_exits_.rbegin()->first.first;
  std::erase_if(recent_exits_, [newest](const auto& entry) { return entry.first.first < newest - 1; });
}

void Agent::on(const proto::AgentAttachRequest& attach) {
  if (config_) return protocol_error("attach after config (attach is a fresh agent's first frame)");
  // From here on this process is a pipe. SIGTERM (our parent's death among others) ends it.
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  input_open_ = false;
  exit_code_ = static_cast<ExitCode>(run_attach_pipe(input_fd_, out_.fd(), attach.socket, decoder_.take_buffered()));
  done_ = true;
}

}  // namespace dtrain::agent::detail
