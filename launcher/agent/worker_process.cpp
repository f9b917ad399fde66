#include "launcher/agent/worker_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "launcher/base/child_process.h"

extern char** environ;

namespace dtrain::agent {
namespace {

// The directory of the dtrain binary this agent runs (symlinks resolved); "" when unknown.
std::string own_directory() {
  char path[4096];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return "";
  std::string exe(path, static_cast<size_t>(length));
  size_t slash = exe.rfind('/');
  return slash == std::string::npos || slash == 0 ? "" : exe.substr(0, slash);
}

}  // namespace

std::map<std::string, std::string> worker_environment(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> merged;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    merged[std::string(*entry, static_cast<size_t>(equals - *entry))] = equals + 1;
  }
  for (const auto& [name, value] : env) merged[name] = value;
  auto requested = env.find("PATH");
  merged["PATH"] = worker_search_path(own_directory(), requested == env.end() ? nullptr : &requested->second,
                                      std::getenv("PATH"));
  return merged;
}

namespace {

std::vector<std::string> build_environment(const WorkerLaunch& launch) {
  std::vector<std::string> flat;
  for (const auto& [name, value] : worker_environment(launch.env)) flat.push_back(name + "=" + value);
  return flat;
}

}  // namespace

std::string worker_path_for(const WorkerLaunch& launch) {
  auto requested = launch.env.find("PATH");
  return worker_search_path(own_directory(), requested == launch.env.end() ? nullptr : &requested->second,
                            std::getenv("PATH"));
}

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
      gen_(launch_.standby ? kStandbyGeneration : launch_.gen),
      pid_(pid),
      handle_(ProcessHandle::for_child(pid)),
      stdout_{"stdout", std::move(out), LineSplitter()},
      stderr_{"stderr", std::move(err), LineSplitter()} {}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::spawn(const WorkerLaunch& launch) {
  if (launch.argv.empty()) return Error::internal("spawn with an empty argv");
  Result<Pipe> out = make_pipe();
  Result<Pipe> err = make_pipe();
  if (!out) return out.error();
  if (!err) return err.error();

  SpawnRequest request;
  request.argv = launch.argv;
  request.environment = build_environment(launch);
  request.working_directory = launch.workdir;
  request.stdin_fd = kDevNull;
  request.stdout_fd = out->write_end.get();
  request.stderr_fd = err->write_end.get();
  request.own_process_group = true;    // the agent's kill and fence signal the whole group
  request.kill_with_parent = true;     // an agent that dies without fencing (SIGKILL, OOM) takes it along
  request.reset_every_signal = true;   // the agent blocks and redirects signals for its loop
  SpawnOutcome spawned = spawn_process(request);
  out->write_end.reset();
  err->write_end.reset();
  std::string reason = errno_text(spawned.error_number);
  switch (spawned.failed_step) {
    case SpawnStep::none: break;
    case SpawnStep::working_directory: return Error::user("workdir '" + launch.workdir + "': " + reason);
    case SpawnStep::exec: return Error::user("worker.command[0] '" + launch.argv[0] + "': " + reason);
    case SpawnStep::stdio: return Error::infra("setting up the worker's stdio: " + reason);
    case SpawnStep::pipe: return Error::infra("pipe: " + reason);
    case SpawnStep::fork: return Error::infra("fork: " + reason);
  }
  (void)set_nonblocking(out->read_end.get());
  (void)set_nonblocking(err->read_end.get());
  return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(launch, spawned.pid, std::move(out->read_end), std::move(err->read_end)));
}

void WorkerProcess::assign(WorkerLaunch launch) {
  launch.standby = false;
  launch_ = std::move(launch);
  gen_ = launch_.gen;
  tail_.clear();
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

std::vector<std::string> WorkerProcess::tail() const { return {tail_.begin(), tail_.end()}; }

std::string signal_name(int signal_number) {
  if (const char* abbreviation = sigabbrev_np(signal_number)) {
    return std::string("SIG") + abbreviation;
  }
  return "signal " + std::to_string(signal_number);
}

void set_wait_status(proto::WorkerExitReport& exit, int status) {
  if (WIFEXITED(status)) {
    exit.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
    exit.signal_name = signal_name(WTERMSIG(status));
    exit.core_dumped = WCOREDUMP(status);
  }
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return signal_name(WTERMSIG(status)) + (WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return "wait status " + std::to_string(status);
}

}  // namespace dtrain::agent
