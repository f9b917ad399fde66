#include "launcher/run/failure_sample.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"

namespace dtrain::run {

namespace {

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

std::string gdb_backtrace(int pid, Millis timeout) {
  std::string gdb = find_gdb();
  if (gdb.empty()) return "(gdb not installed: no user-space backtrace)\n";
  Result<Pipe> pipe = make_pipe();
  if (!pipe) return "(pipe: " + pipe.error().message + ")\n";
  pid_t child = ::fork();
  if (child == 0) {
    ::dup2(pipe->write_end.get(), STDOUT_FILENO);
    ::dup2(pipe->write_end.get(), STDERR_FILENO);
    std::string target = std::to_string(pid);
    ::execl(gdb.c_str(), "gdb", "-batch", "-nx", "-p", target.c_str(), "-ex", "thread apply all bt",
            static_cast<char*>(nullptr));
    _exit(127);
  }
  pipe->write_end.reset();
  (void)set_nonblocking(pipe->read_end.get());
  std::string output;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool exited = false;
  while (std::chrono::steady_clock::now() < deadline) {
    bool would_block = false;
    (void)read_some(pipe->read_end.get(), output, &would_block);
    if (::waitpid(child, nullptr, WNOHANG) == child) {
      exited = true;
      (void)read_some(pipe->read_end.get(), output, &would_block);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    output += "\n(gdb stopped after " + format_duration(timeout) + ")\n";
  }
  return output;
}

}  // namespace

std::string capture_local_sample(int pid, Millis gdb_timeout) {
  std::string text = "pid " + std::to_string(pid) + "\n\n== /proc/" + std::to_string(pid) + "/status (excerpt)\n";
  for (const std::string& line : split(read_proc(pid, "status"), '\n')) {
    if (starts_with(line, "Name:") || starts_with(line, "State:") || starts_with(line, "Threads:") ||
        starts_with(line, "VmRSS:")) {
      text += line + "\n";
    }
  }
  text += "\n== wchan\n" + read_proc(pid, "wchan") + "\n";
  text += "\n== kernel stack (/proc/" + std::to_string(pid) + "/stack)\n" + read_proc(pid, "stack");
  text += "\n== backtrace (gdb)\n" + gdb_backtrace(pid, gdb_timeout);
  return text;
}

}  // namespace dtrain::run
