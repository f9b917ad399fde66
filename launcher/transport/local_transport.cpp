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

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "agent exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return std::string("agent killed by ") +
           (name ? std::string("SIG") + name : "signal " + std::to_string(WTERMSIG(status)));
  }
  return "agent stopped (wait status " + std::to_string(status) + ")";
}

// Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

Result<std::string> this_executable() {
  char path[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length < 0) return Error::infra("readlink /proc/self/exe: " + errno_text(errno));
  return std::string(path, static_cast<size_t>(length));
}

}  // namespace

LocalAgentConnection::LocalAgentConnection(std::string host, pid_t pid, UniqueFd stdin_fd,
                                           UniqueFd stdout_fd, UniqueFd stderr_fd)
    : host_(std::move(host)),
      pid_(pid),
      stdin_(std::move(stdin_fd)),
      stdout_(std::move(stdout_fd)),
      stderr_(std::move(stderr_fd)),
      pidfd_(open_pidfd(pid)) {}

LocalAgentConnection::~LocalAgentConnection() { shutdown(kDestructorGraceMs); }

std::vector<pollfd> LocalAgentConnection::poll_fds() const {
  std::vector<pollfd> fds;
  if (stdout_.valid()) fds.push_back({stdout_.get(), POLLIN, 0});
  if (stderr_.valid()) fds.push_back({stderr_.get(), POLLIN, 0});
  if (stdin_.valid() && !outgoing_.empty()) fds.push_back({stdin_.get(), POLLOUT, 0});
  if (stdout_closed_ && !wait_status_ && pidfd_.valid()) fds.push_back({pidfd_.get(), POLLIN, 0});
  return fds;
}

void LocalAgentConnection::pump() {
  write_queued();
  read_stdout();
  read_stderr();
  if (stdout_closed_) try_reap();
}

void LocalAgentConnection::send(std::string bytes) {
  if (!stdin_.valid()) return;  // input closed: the agent is fencing; nothing more to say
  outgoing_ += bytes;
}

std::string LocalAgentConnection::take_received() { return std::exchange(received_, {}); }
std::string LocalAgentConnection::take_diagnostics() { return std::exchange(diagnostics_, {}); }

bool LocalAgentConnection::closed() const {
  if (!stdout_closed_) return false;
  return try_reap() || !pidfd_.valid() || monotonic_ms() - stdout_closed_ms_ >= kExitAfterEofMs;
}

std::string LocalAgentConnection::close_reason() const {
  if (!closed()) return "";
  if (try_reap()) return describe_status(*wait_status_);
  if (!read_error_.empty()) return "reading the agent's output failed: " + read_error_;
  return "agent closed its output (pid " + std::to_string(pid_) + " still running)";
}

void LocalAgentConnection::write_queued() {
  while (stdin_.valid() && !outgoing_.empty()) {
    ssize_t n = ::write(stdin_.get(), outgoing_.data(), outgoing_.size());
    if (n > 0) {
      outgoing_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EPIPE: the agent is gone; its stdout EOF tells the rest.
    outgoing_.clear();
    stdin_.reset();
  }
}

void LocalAgentConnection::read_stdout() {
  while (stdout_.valid()) {
    bool would_block = false;
    Result<size_t> got = read_some(stdout_.get(), received_, &would_block);
    if (got && would_block) return;
    if (got && *got > 0) continue;
    if (!got) read_error_ = got.error().message;
    stdout_.reset();
    stdout_closed_ = true;
    stdout_closed_ms_ = monotonic_ms();
  }
}

void LocalAgentConnection::read_stderr() {
  while (stderr_.valid()) {
    bool would_block = false;
    Result<size_t> got = read_some(stderr_.get(), diagnostics_, &would_block);
    if (got && would_block) return;
    if (got && *got > 0) continue;
    stderr_.reset();
  }
}

bool LocalAgentConnection::try_reap() const {
  if (wait_status_) return true;
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(pid_, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == pid_) wait_status_ = status;
  return wait_status_.has_value();
}

void LocalAgentConnection::close_input() {
  write_queued();
  outgoing_.clear();
  stdin_.reset();
}

void LocalAgentConnection::shutdown(int grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  close_input();
  // Keep reading while waiting: an agent blocked on a full stdout pipe could not finish fencing.
  int64_t deadline = monotonic_ms() + std::max(grace_ms, 0);
  while (!try_reap()) {
    int64_t left = deadline - monotonic_ms();
    if (left <= 0) break;
    std::vector<pollfd> fds = poll_fds();
    if (fds.empty()) {
      ::usleep(10'000);  // pipes closed, process not reaped yet: it is about to exit
    } else {
      ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 50)));
    }
    read_stdout();
    read_stderr();
  }
  if (!wait_status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    wait_status_ = status;
  }
  read_stdout();
  read_stderr();
  stdout_.reset();
  stderr_.reset();
  pidfd_.reset();
  stdout_closed_ = true;
}

std::string LocalAgentConnection::describe() const {
  return host_ + " (local agent pid " + std::to_string(pid_) + ")";
}

Result<std::unique_ptr<AgentConnection>> LocalTransport::start_agent(const AgentTarget& target) {
  std::string path = target.dtrain_path;
  if (path.empty()) {
    Result<std::string> self = this_executable();
    if (!self) return self.error();
    path = *self;
  }
  Result<Pipe> input = make_pipe();
  Result<Pipe> output = make_pipe();
  Result<Pipe> errors = make_pipe();
  Result<Pipe> report = make_pipe();  // exec failure: errno through a CLOEXEC pipe
  for (auto* pipe : {&input, &output, &errors, &report}) {
    if (!*pipe) return Error::infra("starting the local agent: " + pipe->error().message);
  }
  std::string argument = "agent";
  char* argv[] = {path.data(), argument.data(), nullptr};
  pid_t pid = ::fork();
  if (pid < 0) return Error::infra("starting the local agent: fork: " + errno_text(errno));
  if (pid == 0) {
    // The supervisor may block signals for its own loop; the agent sets up its own.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(input->read_end.get(), STDIN_FILENO);
    ::dup2(output->write_end.get(), STDOUT_FILENO);
    ::dup2(errors->write_end.get(), STDERR_FILENO);
    // Only the three pipes go to the agent: an inherited fd of the supervisor's (another
    // agent's pipe, a log file) would otherwise live as long as this agent and its workers.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execv(argv[0], argv);
    int error_number = errno;
    ssize_t ignored = ::write(report->write_end.get(), &error_number, sizeof error_number);
    (void)ignored;
    ::_exit(127);
  }
  input->read_end.reset();
  output->write_end.reset();
  errors->write_end.reset();
  report->write_end.reset();
  int error_number = 0;
  ssize_t got;
  do {
    got = ::read(report->read_end.get(), &error_number, sizeof error_number);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof error_number)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return Error::infra(target.host + ": cannot run '" + path + " agent': " +
                        errno_text(error_number));
  }
  for (int fd : {input->write_end.get(), output->read_end.get(), errors->read_end.get()}) {
    if (Status status = set_nonblocking(fd); !status) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      return Error::infra("starting the local agent: " + status.error().message);
    }
  }
  return std::unique_ptr<AgentConnection>(new LocalAgentConnection(
      target.host, pid, std::move(input->write_end), std::move(output->read_end),
      std::move(errors->read_end)));
}

}  // namespace dtrain::transport
