#include "launcher/base/child_process.h"

#include <sys/prctl.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <chrono>

extern char** environ;

namespace dtrain {

namespace {

int64_t monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void reap_blocking(pid_t pid, int* status) {
  while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

// What the child sends through the CLOEXEC pipe when it fails before exec. Nothing arrives
// (EOF) when exec succeeds.
struct ChildFailure {
  SpawnStep step;
  int error_number;
};

[[noreturn]] void fail_in_child(int report_fd, SpawnStep step, int error_number) {
  ChildFailure failure{step, error_number};
  ssize_t ignored = ::write(report_fd, &failure, sizeof failure);
  (void)ignored;
  ::_exit(127);
}

// The arrays exec needs, built before fork: the child must not allocate (another thread may
// have held the allocator's lock at fork, and the child would wait for it for ever). Neither
// copied nor moved: the pointers point into the strings' own buffers.
class ExecArrays {
 public:
  explicit ExecArrays(const SpawnRequest& request)
      : argv_strings_(request.argv), env_strings_(request.environment.value_or(std::vector<std::string>{})) {
    for (std::string& argument : argv_strings_) argv_.push_back(argument.data());
    argv_.push_back(nullptr);
    if (!request.environment) return;
    for (std::string& entry : env_strings_) envp_.push_back(entry.data());
    envp_.push_back(nullptr);
  }
  ExecArrays(const ExecArrays&) = delete;
  ExecArrays& operator=(const ExecArrays&) = delete;

  char** argv() { return argv_.data(); }
  /// nullptr: the child keeps our environment.
  char** envp() { return envp_.empty() ? nullptr : envp_.data(); }

 private:
  std::vector<std::string> argv_strings_;
  std::vector<std::string> env_strings_;
  std::vector<char*> argv_;
  std::vector<char*> envp_;
};

// Runs in the forked child: async-signal-safe calls only, from here to exec.
[[noreturn]] void become_child(const SpawnRequest& request, ExecArrays& arrays, pid_t parent_pid,
                               int report_fd) {
  if (request.own_process_group) ::setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (request.reset_every_signal) {
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  } else {
    ::signal(SIGPIPE, SIG_DFL);
  }
  if (request.kill_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent died before prctl took effect: nothing would ever kill this child.
    if (::getppid() != parent_pid) ::_exit(127);
  }
  // fds 0-2 from the request. A source that is itself one of 0-2 (our own stdio closed, so a
  // pipe got a low number) moves above 2 first: placing one fd must not overwrite another
  // before it is placed, and dup2 onto itself would keep its CLOEXEC.
  int sources[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    if (sources[target] != kDevNull) continue;
    sources[target] = ::open("/dev/null", target == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (sources[target] < 0) fail_in_child(report_fd, SpawnStep::stdio, errno);
  }
  for (int& source : sources) {
    if (source > 2) continue;
    int moved = ::fcntl(source, F_DUPFD, 3);
    if (moved < 0) fail_in_child(report_fd, SpawnStep::stdio, errno);
    for (int& same : sources) {
      if (same == source && &same != &source) same = moved;
    }
    source = moved;
  }
  for (int target = 0; target < 3; ++target) {
    if (::dup2(sources[target], target) < 0) fail_in_child(report_fd, SpawnStep::stdio, errno);
  }
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  for (int fd : request.fds_to_keep) {
    if (::fcntl(fd, F_SETFD, 0) < 0) fail_in_child(report_fd, SpawnStep::stdio, errno);
  }
  if (!request.working_directory.empty() && ::chdir(request.working_directory.c_str()) != 0) {
    fail_in_child(report_fd, SpawnStep::working_directory, errno);
  }
  if (arrays.envp() != nullptr) environ = arrays.envp();  // execvp searches the child's PATH
  ::execvp(arrays.argv()[0], arrays.argv());
  fail_in_child(report_fd, SpawnStep::exec, errno);
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

SpawnOutcome spawn_process(const SpawnRequest& request) {
  if (request.argv.empty()) return {-1, SpawnStep::exec, EINVAL};
  ExecArrays arrays(request);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {-1, SpawnStep::pipe, errno};
  UniqueFd report_read(report[0]);
  UniqueFd report_write(report[1]);
  if (report_write.get() <= STDERR_FILENO) {  // our stdio closed: the child's dup2s would overwrite it
    int moved = ::fcntl(report[1], F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (moved < 0) return {-1, SpawnStep::pipe, errno};
    report_write = UniqueFd(moved);
  }
  pid_t parent_pid = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return {-1, SpawnStep::fork, errno};
  if (pid == 0) become_child(request, arrays, parent_pid, report_write.get());
  if (request.own_process_group) ::setpgid(pid, pid);
  report_write.reset();
  // Blocks only until the child execs (EOF through CLOEXEC) or reports a failure.
  ChildFailure failure{};
  ssize_t got;
  do {
    got = ::read(report_read.get(), &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    int status = 0;
    reap_blocking(pid, &status);
    return {-1, failure.step, failure.error_number};
  }
  return {pid, SpawnStep::none, 0};
}

Result<PipedChild> PipedChild::spawn(const std::vector<std::string>& argv, Options options) {
  if (argv.empty()) return Error::internal("PipedChild::spawn: empty argv");
  Result<Pipe> input = make_pipe();
  Result<Pipe> output = make_pipe();
  Result<Pipe> errors = make_pipe();
  for (auto* pipe : {&input, &output, &errors}) {
    if (!*pipe) return Error::infra("starting " + argv[0] + ": " + pipe->error().message);
  }
  SpawnRequest request;
  request.argv = argv;
  request.stdin_fd = input->read_end.get();
  request.stdout_fd = output->write_end.get();
  request.stderr_fd = errors->write_end.get();
  request.own_process_group = options.own_process_group;
  request.kill_with_parent = options.kill_with_parent;
  request.environment = options.environment;
  request.working_directory = options.working_directory;
  SpawnOutcome spawned = spawn_process(request);
  input->read_end.reset();
  output->write_end.reset();
  errors->write_end.reset();
  std::string reason = errno_text(spawned.error_number);
  switch (spawned.failed_step) {
    case SpawnStep::none: break;
    case SpawnStep::exec: return Error::infra("cannot run '" + argv[0] + "': " + reason);
    case SpawnStep::pipe: return Error::infra("starting " + argv[0] + ": pipe: " + reason);
    case SpawnStep::fork: return Error::infra("starting " + argv[0] + ": fork: " + reason);
    case SpawnStep::stdio: return Error::infra("starting " + argv[0] + ": its stdio: " + reason);
    case SpawnStep::working_directory:
      return Error::infra("starting " + argv[0] + ": its working directory '" + options.working_directory + "': " + reason);
  }
  PipedChild child(spawned.pid, options.own_process_group, std::move(input->write_end),
                   std::move(output->read_end), std::move(errors->read_end));
  for (int fd : {child.stdin_.get(), child.stdout_.get(), child.stderr_.get()}) {
    if (Status status = set_nonblocking(fd); !status) {
      return Error::infra("starting " + argv[0] + ": " + status.error().message);  // child's destructor kills it
    }
  }
  return child;
}

PipedChild::PipedChild(pid_t pid, bool group, UniqueFd in, UniqueFd out, UniqueFd err)
    : handle_(ProcessHandle::for_child(pid)),
      own_group_(group),
      stdin_(std::move(in)),
      stdout_(std::move(out)),
      stderr_(std::move(err)) {}

PipedChild::PipedChild(PipedChild&& other) noexcept
    : handle_(std::exchange(other.handle_, ProcessHandle())),
      own_group_(other.own_group_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      outgoing_(std::move(other.outgoing_)),
      outgoing_offset_(other.outgoing_offset_),
      stdout_bytes_(std::move(other.stdout_bytes_)),
      stderr_bytes_(std::move(other.stderr_bytes_)),
      stdout_closed_ms_(other.stdout_closed_ms_),
      killed_(other.killed_) {}

PipedChild::~PipedChild() {
  if (pid() > 0) kill_and_reap();
}

std::vector<pollfd> PipedChild::poll_fds() const {
  std::vector<pollfd> fds;
  if (stdout_.valid()) fds.push_back({stdout_.get(), POLLIN, 0});
  if (stderr_.valid()) fds.push_back({stderr_.get(), POLLIN, 0});
  if (stdin_.valid() && outgoing_offset_ < outgoing_.size()) fds.push_back({stdin_.get(), POLLOUT, 0});
  if (!stdout_.valid() && !stderr_.valid() && handle_.exit_fd() >= 0 && !handle_.reaped()) {
    fds.push_back({handle_.exit_fd(), POLLIN, 0});
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

void PipedChild::terminate(int grace_ms) {
  if (pid() <= 0) return;
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
}

void PipedChild::kill_and_reap() {
  if (killed_) return;
  killed_ = true;
  // What it started in its group goes too, while the group is still its own: send_signal skips
  // a reaped child, whose group number may belong to someone else by now.
  if (own_group_) (void)send_signal(handle_, SIGKILL, SignalScope::group);
  if (handle_.reaped()) return;
  (void)send_signal(handle_, SIGKILL);
  (void)handle_.reap();
}

namespace {

Result<CommandOutput> run_to_end(const std::vector<std::string>& argv, Millis timeout, const PipedChild::Options& options,
                                 size_t max_output_bytes, std::string input) {
  Result<PipedChild> started = PipedChild::spawn(argv, options);
  if (!started) return started.error();
  PipedChild& child = *started;
  if (input.empty()) child.close_input();
  else child.write(std::move(input));
  CommandOutput output;
  const int64_t deadline = monotonic_ms() + timeout.count();
  // Its exit, not its pipes' EOF, ends the command. Who holds the pipes open after it exited is
  // something it started that outlived it (a daemon that left its process group with our pipe as
  // its stdout): that EOF may never come, and the caller (an agent's hello) must not wait for it.
  // A short grace after the exit still takes what a background job of its own group writes last.
  constexpr int64_t kAfterExitGraceMs = 100;
  int64_t exited_ms = -1;
  for (;;) {
    if (exited_ms < 0 && child.reaped()) exited_ms = monotonic_ms();
    child.pump();
    if (!child.input_closed() && !child.input_pending()) child.close_input();  // all written: EOF
    output.out += child.take_stdout();
    output.err += child.take_stderr();
    if (output.out.size() + output.err.size() > max_output_bytes) {
      return Error::infra(argv[0] + " wrote more than " + std::to_string(max_output_bytes) + " bytes; it was killed");
    }
    const int64_t now = monotonic_ms();
    if (exited_ms >= 0 && (child.output_closed() || now - exited_ms >= kAfterExitGraceMs)) break;
    int64_t left = (exited_ms >= 0 ? exited_ms + kAfterExitGraceMs : deadline) - now;
    if (exited_ms < 0 && left <= 0) {
      return Error::infra(argv[0] + " did not finish within " + format_duration(timeout) + "; it was killed");
    }
    std::vector<pollfd> fds = child.poll_fds();
    // Woken by its exit as well as by its output (poll_fds has the pidfd only once both ended).
    const int exit_fd = child.handle().exit_fd();
    if (exited_ms < 0 && exit_fd >= 0 &&
        std::none_of(fds.begin(), fds.end(), [&](const pollfd& entry) { return entry.fd == exit_fd; })) {
      fds.push_back({exit_fd, POLLIN, 0});
    }
    if (fds.empty()) ::usleep(5'000);
    else ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left, 1, 200)));
  }
  child.terminate(0);  // closes our ends: a daemon still holding theirs gets EPIPE, not our wait
  output.out += child.take_stdout();
  output.err += child.take_stderr();
  int status = *child.wait_status();
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

}  // namespace

Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout) {
  return run_to_end(argv, timeout, {}, std::numeric_limits<size_t>::max(), {});
}

Result<CommandOutput> run_command_with_input(const std::vector<std::string>& argv, std::string input, Millis timeout) {
  return run_to_end(argv, timeout, {}, std::numeric_limits<size_t>::max(), std::move(input));
}

Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout,
                                  const PipedChild::Options& options, size_t max_output_bytes) {
  return run_to_end(argv, timeout, options, max_output_bytes, {});
}

}  // namespace dtrain
