#include "launcher/agent/failure_sample.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "launcher/base/child_process.h"
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
  PipedChild::Options options;
  options.kill_with_parent = true;  // never left attached to a worker if we die
  Result<PipedChild> started =
      PipedChild::spawn({gdb, "-batch", "-nx", "-p", std::to_string(pid), "-ex", "thread apply all bt"}, options);
  if (!started) return "(" + started.error().message + ")\n";
  PipedChild& child = *started;
  child.close_input();
  std::string output;
  auto keep = [&](std::string chunk) {
    if (output.size() < max_bytes) output += chunk.substr(0, max_bytes - output.size());
  };
  auto deadline = Clock::now() + timeout;
  while (!child.stdout_closed() || !child.reaped()) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) break;
    std::vector<pollfd> fds = child.poll_fds();
    if (fds.empty()) ::usleep(5'000);
    else ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 100)));
    child.pump();
    keep(child.take_stdout());  // stdout and stderr both: gdb's complaints say why there is no trace
    keep(child.take_stderr());
  }
  bool finished = child.reaped();
  child.terminate(0);  // kills and reaps a gdb past its time
  if (!finished) output += "\n(gdb stopped after " + format_duration(timeout) + ")\n";
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
