#include "launcher/base/child_process.h"

#include <sys/prctl.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace dtrain {

namespace {

int64_t monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

void reap_blocking(pid_t pid, int* status) {
  while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

std::string PipedChild::describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return "killed by " + (name ? std::string("SIG") + name : "signal " + std::to_string(WTERMSIG(status)));
  }
  return "stopped (wait status " + std::to_string(status) + ")";
}

Result<PipedChild> PipedChild::spawn(const std::vector<std::string>& argv, Options options) {
  if (argv.empty()) return Error::internal("PipedChild::spawn: empty argv");
  Result<Pipe> input = make_pipe();
  Result<Pipe> output = make_pipe();
  Result<Pipe> errors = make_pipe();
  Result<Pipe> report = make_pipe();  // exec failure: errno through a CLOEXEC pipe
  for (auto* pipe : {&input, &output, &errors, &report}) {
    if (!*pipe) return Error::infra("starting " + argv[0] + ": " + pipe->error().message);
  }
  std::vector<char*> args;
  for (const std::string& argument : argv) args.push_back(const_cast<char*>(argument.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return Error::infra("starting " + argv[0] + ": fork: " + errno_text(errno));
  if (pid == 0) {
    if (options.own_process_group) ::setpgid(0, 0);
    if (options.kill_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The owner may block signals for its own loop; the child sets up its own.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(input->read_end.get(), STDIN_FILENO);
    ::dup2(output->write_end.get(), STDOUT_FILENO);
    ::dup2(errors->write_end.get(), STDERR_FILENO);
    // Only the three pipes go to the child: an inherited fd of ours (another child's pipe, a
    // log file) would otherwise live as long as it and whatever it starts.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execvp(args[0], args.data());
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
    reap_blocking(pid, &status);
    return Error::infra("cannot run '" + argv[0] + "': " + errno_text(error_number));
  }
  PipedChild child(pid, options.own_process_group, std::move(input->write_end), std::move(output->read_end),
                   std::move(errors->read_end));
  for (int fd : {child.stdin_.get(), child.stdout_.get(), child.stderr_.get()}) {
    if (Status status = set_nonblocking(fd); !status) {
      return Error::infra("starting " + argv[0] + ": " + status.error().message);  // child's destructor kills it
    }
  }
  return child;
}

PipedChild::PipedChild(pid_t pid, bool group, UniqueFd in, UniqueFd out, UniqueFd err)
    : pid_(pid),
      own_group_(group),
      stdin_(std::move(in)),
      stdout_(std::move(out)),
      stderr_(std::move(err)),
      pidfd_(open_pidfd(pid)) {}

PipedChild::PipedChild(PipedChild&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      own_group_(other.own_group_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      pidfd_(std::move(other.pidfd_)),
      outgoing_(std::move(other.outgoing_)),
      outgoing_offset_(other.outgoing_offset_),
      stdout_bytes_(std::move(other.stdout_bytes_)),
      stderr_bytes_(std::move(other.stderr_bytes_)),
      stdout_closed_ms_(other.stdout_closed_ms_),
      killed_(other.killed_),
      wait_status_(other.wait_status_) {}

PipedChild::~PipedChild() {
  if (pid_ > 0) kill_and_reap();
}

std::vector<pollfd> PipedChild::poll_fds() const {
  std::vector<pollfd> fds;
  if (stdout_.valid()) fds.push_back({stdout_.get(), POLLIN, 0});
  if (stderr_.valid()) fds.push_back({stderr_.get(), POLLIN, 0});
  if (stdin_.valid() && outgoing_offset_ < outgoing_.size()) fds.push_back({stdin_.get(), POLLOUT, 0});
  if (!stdout_.valid() && !stderr_.valid() && !wait_status_ && pidfd_.valid()) {
    fds.push_back({pidfd_.get(), POLLIN, 0});
  }
  return fds;
}

void PipedChild::pump() {
  write_queued();
  read_into(stdout_, stdout_bytes_);
  read_into(stderr_, stderr_bytes_);
  if (!stdout_.valid()) wait_status();
}

void PipedChild::write(std::string bytes) {
  if (!stdin_.valid()) return;
  outgoing_ += bytes;
}

void PipedChild::write_queued() {
  while (stdin_.valid() && outgoing_offset_ < outgoing_.size()) {
    ssize_t n = ::write(stdin_.get(), outgoing_.data() + outgoing_offset_, outgoing_.size() - outgoing_offset_);
    if (n > 0) {
      outgoing_offset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // EPIPE: the child closed its input or is gone; its stdout EOF tells the rest.
    outgoing_.clear();
    outgoing_offset_ = 0;
    stdin_.reset();
  }
  // Drop what was written once it is half the buffer: erasing the front after every 64 KiB pipe
  // write would move a 100 MB binary (provisioning) thousands of times; this moves it about once.
  if (outgoing_offset_ == outgoing_.size() || outgoing_offset_ > outgoing_.size() / 2) {
    outgoing_.erase(0, outgoing_offset_);
    outgoing_offset_ = 0;
  }
}

void PipedChild::read_into(UniqueFd& fd, std::string& into) {
  while (fd.valid()) {
    bool would_block = false;
    Result<size_t> got = read_some(fd.get(), into, &would_block);
    if (got && would_block) return;
    if (got && *got > 0) continue;
    if (&fd == &stdout_) stdout_closed_ms_ = monotonic_ms();
    fd.reset();
  }
}

void PipedChild::close_input() {
  write_queued();
  outgoing_.clear();
  outgoing_offset_ = 0;
  stdin_.reset();
}

std::optional<int> PipedChild::wait_status() const {
  if (wait_status_ || pid_ <= 0) return wait_status_;
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(pid_, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == pid_) wait_status_ = status;
  return wait_status_;
}

void PipedChild::terminate(int grace_ms) {
  if (pid_ <= 0) return;
  close_input();
  int64_t deadline = monotonic_ms() + std::max(grace_ms, 0);
  while (!wait_status()) {
    int64_t left = deadline - monotonic_ms();
    if (left <= 0) break;
    std::vector<pollfd> fds = poll_fds();
    if (fds.empty()) {
      ::usleep(10'000);  // pipes closed, not reaped yet: it is about to exit
    } else {
      ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 50)));
    }
    read_into(stdout_, stdout_bytes_);
    read_into(stderr_, stderr_bytes_);
  }
  kill_and_reap();
  read_into(stdout_, stdout_bytes_);
  read_into(stderr_, stderr_bytes_);
  stdout_.reset();
  stderr_.reset();
  pidfd_.reset();
}

void PipedChild::kill_and_reap() {
  if (killed_) return;
  killed_ = true;
  if (own_group_) ::kill(-pid_, SIGKILL);  // what it started in its group goes too
  if (wait_status_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  reap_blocking(pid_, &status);
  wait_status_ = status;
}

Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout) {
  Result<PipedChild> started = PipedChild::spawn(argv, {});
  if (!started) return started.error();
  PipedChild& child = *started;
  child.close_input();
  CommandOutput output;
  int64_t deadline = monotonic_ms() + timeout.count();
  while (!child.stdout_closed() || !child.reaped()) {
    int64_t left = deadline - monotonic_ms();
    if (left <= 0) {
      return Error::infra(argv[0] + " did not finish within " + format_duration(timeout) + "; it was killed");
    }
    std::vector<pollfd> fds = child.poll_fds();
    if (fds.empty()) ::usleep(5'000);
    else ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 200)));
    child.pump();
    output.out += child.take_stdout();
    output.err += child.take_stderr();
  }
  child.terminate(0);
  output.out += child.take_stdout();
  output.err += child.take_stderr();
  int status = *child.wait_status();
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

}  // namespace dtrain
