#include "launcher/agent/failure_sample.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"

namespace dtrain::agent {

namespace {

using Clock = std::chrono::steady_clock;

std::string read_proc(int pid, const char* name) {
  Result<std::string> text = read_file("/proc/" + std::to_string(pid) + "/" + name);
  if (!text) return "(unreadable: " + text.error().message + ")\n";
  return text->empty() ? "(empty)\n" : *text;
}

std::string find_gdb() {
  for (const char* path : {"/usr/bin/gdb", "/usr/local/bin/gdb", "/bin/gdb"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return {};
}

// The debugger's output, read until it exits or `timeout` passes (then it is killed). Output
// past `max_bytes` is read and dropped so that gdb never blocks on a full pipe.
std::string gdb_backtrace(int pid, Millis timeout, size_t max_bytes) {
  std::string gdb = find_gdb();
  if (gdb.empty()) return "(gdb not installed: no user-space backtrace)\n";
  Result<Pipe> pipe = make_pipe();
  if (!pipe) return "(pipe: " + pipe.error().message + ")\n";
  std::string target = std::to_string(pid);
  pid_t child = ::fork();
  if (child < 0) return "(fork: " + errno_text(errno) + ")\n";
  if (child == 0) {
    // The agent blocks SIGCHLD/SIGTERM (it reads them from a signalfd) and ignores SIGPIPE;
    // both would be inherited by gdb, which waits for its inferior with SIGCHLD.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never left attached to a worker if we die
    ::dup2(pipe->write_end.get(), STDOUT_FILENO);
    ::dup2(pipe->write_end.get(), STDERR_FILENO);
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::execl(gdb.c_str(), "gdb", "-batch", "-nx", "-p", target.c_str(), "-ex", "thread apply all bt",
            static_cast<char*>(nullptr));
    _exit(127);
  }
  pipe->write_end.reset();
  (void)set_nonblocking(pipe->read_end.get());
  std::string output;
  auto deadline = Clock::now() + timeout;
  bool eof = false;
  while (!eof) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd fd{pipe->read_end.get(), POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(std::min<int64_t>(left, 100))) <= 0) continue;
    std::string chunk;
    bool would_block = false;
    Result<size_t> got = read_some(pipe->read_end.get(), chunk, &would_block);
    if (!got || (*got == 0 && !would_block)) eof = true;
    if (output.size() < max_bytes) output += chunk.substr(0, max_bytes - output.size());
  }
  // EOF means gdb closed its output: it is exiting; a short bounded wait reaps it.
  bool exited = false;
  for (int tries = 0; eof && tries < 50 && !exited; ++tries) {
    exited = ::waitpid(child, nullptr, WNOHANG) == child;
    if (!exited) ::usleep(10'000);
  }
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    output += eof ? "\n(gdb did not exit after closing its output: killed)\n"
                  : "\n(gdb stopped after " + format_duration(timeout) + ")\n";
  }
  return output;
}

}  // namespace

std::string capture_local_sample(int pid, Millis gdb_timeout, size_t max_bytes) {
  std::string id = std::to_string(pid);
  std::string text = "pid " + id + "\n\n== /proc/" + id + "/status (excerpt)\n";
  for (const std::string& line : split(read_proc(pid, "status"), '\n')) {
    if (starts_with(line, "Name:") || starts_with(line, "State:") || starts_with(line, "Threads:") ||
        starts_with(line, "VmRSS:")) {
      text += line + "\n";
    }
  }
  text += "\n== wchan\n" + read_proc(pid, "wchan") + "\n";
  text += "\n== kernel stack (/proc/" + id + "/stack)\n" + read_proc(pid, "stack");
  text += "\n== backtrace (gdb)\n" + gdb_backtrace(pid, gdb_timeout, max_bytes);
  if (text.size() > max_bytes) {
    std::string note = "\n(sample cut at " + std::to_string(max_bytes) + " bytes)\n";
    text.resize(max_bytes > note.size() ? max_bytes - note.size() : 0);
    text += note;
    if (text.size() > max_bytes) text.resize(max_bytes);
  }
  return text;
}

}  // namespace dtrain::agent
