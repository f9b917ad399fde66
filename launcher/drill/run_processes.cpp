#include "launcher/drill/run_processes.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"

namespace dtrain::drill {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

bool is_zombie(int pid) {
  Result<std::string> stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

bool environ_has(int pid, const std::string& entry) {
  Result<std::string> environ = read_file("/proc/" + std::to_string(pid) + "/environ");
  if (!environ) return false;  // another user's process, or gone meanwhile
  const std::string& text = *environ;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    if (text.compare(start, end - start, entry) == 0) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

std::vector<int> processes_of_run(const std::string& run_id) {
  std::vector<int> pids;
  if (run_id.empty()) return pids;
  std::string entry = "DTRAIN_RUN_ID=" + run_id;
  DIR* proc = ::opendir("/proc");
  if (!proc) return pids;
  while (dirent* item = ::readdir(proc)) {
    int pid = std::atoi(item->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (environ_has(pid, entry) && !is_zombie(pid)) pids.push_back(pid);
  }
  ::closedir(proc);
  return pids;
}

bool process_alive(int pid) {
  // Not our child: taken by pid now (refused when gone or a zombie), then signal 0, which also
  // says whether we may signal it.
  if (pid <= 1) return false;
  Result<ProcessHandle> process = ProcessHandle::for_process(pid);
  return process && dtrain::send_signal(*process, 0).ok();
}

std::vector<int> wait_until_gone(const std::vector<int>& pids, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<int> alive;
    for (int pid : pids) {
      if (process_alive(pid)) alive.push_back(pid);
    }
    if (alive.empty() || std::chrono::steady_clock::now() >= deadline) return alive;
    std::this_thread::sleep_for(kPoll);
  }
}

std::vector<int> wait_until_run_gone(const std::string& run_id, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<int> left = processes_of_run(run_id);
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace dtrain::drill
