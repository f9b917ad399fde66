#include "launcher/agent/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace dtrain::agent {
namespace {

// What the child reports through the CLOEXEC pipe when it fails before exec: at which step,
// and errno. Nothing arrives (EOF) when exec succeeds.
enum class Stage : int { chdir = 1, exec = 2, setup = 3 };
struct ChildFailure {
  Stage stage;
  int error_number;
};

// The directory of the dtrain binary this agent runs (symlinks resolved); "" when unknown.
std::string own_directory() {
  char path[4096];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return "";
  std::string exe(path, static_cast<size_t>(length));
  size_t slash = exe.rfind('/');
  return slash == std::string::npos || slash == 0 ? "" : exe.substr(0, slash);
}

std::vector<std::string> build_environment(const WorkerLaunch& launch) {
  std::map<std::string, std::string> merged;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    merged[std::string(*entry, static_cast<size_t>(equals - *entry))] = equals + 1;
  }
  for (const auto& [name, value] : launch.env) merged[name] = value;
  auto requested = launch.env.find("PATH");
  merged["PATH"] = worker_search_path(own_directory(),
                                      requested == launch.env.end() ? nullptr : &requested->second,
                                      std::getenv("PATH"));
  std::vector<std::string> flat;
  for (const auto& [name, value] : merged) flat.push_back(name + "=" + value);
  return flat;
}

[[noreturn]] void fail_in_child(int report_fd, Stage stage, int error_number) {
  ChildFailure failure{stage, error_number};
  ssize_t ignored = ::write(report_fd, &failure, sizeof failure);
  (void)ignored;
  ::_exit(127);
}

// Runs in the forked child. The agent has threads (the resource sampler), so only
// async-signal-safe calls from here to exec: no allocation (another thread may have held the
// allocator's lock at fork). Everything exec needs was prepared before fork.
[[noreturn]] void become_worker(pid_t agent_pid, const WorkerLaunch& launch, char** argv,
                                char** envp, int out_fd, int err_fd, int report_fd) {
  ::setpgid(0, 0);
  // The agent blocks and redirects signals for its own loop; a worker starts clean.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  // If the agent dies without fencing (SIGKILL, OOM), the worker dies with it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent_pid) ::_exit(127);
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0) fail_in_child(report_fd, Stage::setup, errno);
  if (::dup2(null_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
      ::dup2(err_fd, STDERR_FILENO) < 0) {
    fail_in_child(report_fd, Stage::setup, errno);
  }
  // Whatever the agent inherited without CLOEXEC (from sshd, from the supervisor) stays out of
  // the worker, so that no worker can keep another process's pipe open.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (!launch.workdir.empty() && ::chdir(launch.workdir.c_str()) != 0) {
    fail_in_child(report_fd, Stage::chdir, errno);
  }
  environ = envp;  // so that execvp searches the worker's PATH, not the agent's
  ::execvp(argv[0], argv);
  fail_in_child(report_fd, Stage::exec, errno);
}

}  // namespace

std::string worker_search_path(const std::string& dtrain_dir, const std::string* requested_path,
                               const char* agent_path) {
  std::string base = requested_path ? *requested_path
                     : agent_path && *agent_path ? std::string(agent_path)
                                                 : "/usr/local/bin:/usr/bin:/bin";
  if (dtrain_dir.empty()) return base;
  return base.empty() ? dtrain_dir : dtrain_dir + ":" + base;
}

WorkerProcess::WorkerProcess(WorkerLaunch launch, pid_t pid, UniqueFd out, UniqueFd err)
    : launch_(std::move(launch)),
      pid_(pid),
      stdout_{"stdout", std::move(out), LineSplitter()},
      stderr_{"stderr", std::move(err), LineSplitter()} {}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::spawn(const WorkerLaunch& launch) {
  if (launch.argv.empty()) return Error::internal("spawn with an empty argv");
  Result<Pipe> out = make_pipe();
  Result<Pipe> err = make_pipe();
  Result<Pipe> report = make_pipe();
  if (!out) return out.error();
  if (!err) return err.error();
  if (!report) return report.error();

  std::vector<std::string> env_strings = build_environment(launch);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = launch.argv;
  std::vector<char*> argv;
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);

  pid_t agent_pid = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Error::infra(std::string("fork: ") + errno_text(errno));
  if (pid == 0) {
    become_worker(agent_pid, launch, argv.data(), envp.data(), out->write_end.get(),
                  err->write_end.get(), report->write_end.get());
  }
  // Also from the parent: whichever runs first, the group exists before anyone signals it.
  ::setpgid(pid, pid);
  out->write_end.reset();
  err->write_end.reset();
  report->write_end.reset();

  // Blocks only until the child execs (EOF through CLOEXEC) or reports a failure.
  ChildFailure failure{};
  ssize_t got;
  do {
    got = ::read(report->read_end.get(), &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string reason = errno_text(failure.error_number);
    switch (failure.stage) {
      case Stage::chdir: return Error::user("workdir '" + launch.workdir + "': " + reason);
      case Stage::exec: return Error::user("worker.command[0] '" + launch.argv[0] + "': " + reason);
      case Stage::setup: return Error::infra("setting up the worker's stdio: " + reason);
    }
  }
  (void)set_nonblocking(out->read_end.get());
  (void)set_nonblocking(err->read_end.get());
  return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(launch, pid, std::move(out->read_end), std::move(err->read_end)));
}

void WorkerProcess::deliver(Stream& stream, std::vector<std::string> lines, const LineSink& sink) {
  for (std::string& line : lines) {
    tail_.push_back(line);
    while (tail_.size() > launch_.log_tail_lines) tail_.pop_front();
    sink(stream.name, std::move(line));
  }
}

void WorkerProcess::read_stream(Stream& stream, bool until_empty, const LineSink& sink) {
  // One read per call in the loop (fairness between workers); until EAGAIN when draining, but
  // bounded, in case a surviving grandchild writes into the pipe as fast as we read.
  int reads_left = until_empty ? 64 : 1;
  while (reads_left-- > 0) {
    if (!stream.fd.valid()) return;
    std::string chunk;
    bool would_block = false;
    Result<size_t> got = read_some(stream.fd.get(), chunk, &would_block);
    if (got && *got > 0) {
      deliver(stream, stream.splitter.feed(chunk), sink);
      continue;
    }
    if (got && would_block) return;
    deliver(stream, stream.splitter.finish(), sink);  // EOF or a read error
    stream.fd.reset();
    return;
  }
}

void WorkerProcess::read_output(int fd, const LineSink& sink) {
  if (fd == stdout_.fd.get()) read_stream(stdout_, false, sink);
  else if (fd == stderr_.fd.get()) read_stream(stderr_, false, sink);
}

void WorkerProcess::drain_output(const LineSink& sink) {
  for (Stream* stream : {&stdout_, &stderr_}) {
    read_stream(*stream, true, sink);
    deliver(*stream, stream->splitter.finish(), sink);
  }
  stdout_.fd.reset();
  stderr_.fd.reset();
}

nlohmann::json WorkerProcess::tail() const {
  nlohmann::json lines = nlohmann::json::array();
  for (const std::string& line : tail_) lines.push_back(line);
  return lines;
}

std::string signal_name(int signal_number) {
  if (const char* abbreviation = sigabbrev_np(signal_number)) {
    return std::string("SIG") + abbreviation;
  }
  return "signal " + std::to_string(signal_number);
}

nlohmann::json describe_wait_status(int status) {
  nlohmann::json out;
  if (WIFEXITED(status)) {
    out["code"] = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out["signal"] = WTERMSIG(status);
    out["signal_name"] = signal_name(WTERMSIG(status));
    if (WCOREDUMP(status)) out["core_dumped"] = true;
  }
  return out;
}

}  // namespace dtrain::agent
