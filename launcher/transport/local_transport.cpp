#include "launcher/transport/local_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

namespace dtrain::transport {
namespace {

int64_t monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

Result<std::string> this_executable() {
  char path[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length < 0) return Error::infra("readlink /proc/self/exe: " + errno_text(errno));
  return std::string(path, static_cast<size_t>(length));
}

}  // namespace

LocalAgentConnection::LocalAgentConnection(std::string host, PipedChild child)
    : host_(std::move(host)), child_(std::move(child)) {}

LocalAgentConnection::~LocalAgentConnection() { shutdown(kDestructorGraceMs); }

void LocalAgentConnection::pump() {
  child_.pump();
  received_ += child_.take_stdout();
  diagnostics_ += child_.take_stderr();
}

std::string LocalAgentConnection::take_received() { return std::exchange(received_, {}); }
std::string LocalAgentConnection::take_diagnostics() { return std::exchange(diagnostics_, {}); }

bool LocalAgentConnection::closed() const {
  if (!child_.stdout_closed()) return false;
  return child_.reaped() || monotonic_ms() - child_.stdout_closed_ms() >= kExitAfterEofMs;
}

std::string LocalAgentConnection::close_reason() const {
  if (!closed()) return "";
  if (std::optional<int> status = child_.wait_status()) return "agent " + PipedChild::describe_status(*status);
  return "agent closed its output (pid " + std::to_string(child_.pid()) + " still running)";
}

void LocalAgentConnection::shutdown(int grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  // Reads while waiting: an agent blocked on a full stdout pipe could not finish fencing.
  child_.terminate(std::max(grace_ms, 0));
  received_ += child_.take_stdout();
  diagnostics_ += child_.take_stderr();
}

std::string LocalAgentConnection::describe() const {
  return host_ + " (local agent pid " + std::to_string(child_.pid()) + ")";
}

Result<std::unique_ptr<AgentConnection>> LocalTransport::start_agent(const AgentTarget& target) {
  std::string path = target.dtrain_path;
  if (path.empty()) {
    Result<std::string> self = this_executable();
    if (!self) return self.error();
    path = *self;
  }
  Result<PipedChild> child = PipedChild::spawn({path, "agent"}, {});
  if (!child) return Error::infra(target.host + ": " + child.error().message);
  return std::unique_ptr<AgentConnection>(new LocalAgentConnection(target.host, std::move(child).value()));
}

}  // namespace dtrain::transport
