#include "tests/integration/support/process_probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace dtrain::test {
namespace {

struct Stat {
  std::string name;
  char state = '?';
  pid_t parent = 0;
};

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::optional<Stat> read_stat(pid_t pid) {
  auto text = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  size_t open = text->find('(');
  size_t close = text->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > text->size()) {
    return std::nullopt;
  }
  Stat stat;
  stat.name = text->substr(open + 1, close - open - 1);
  stat.state = (*text)[close + 2];
  stat.parent = static_cast<pid_t>(std::strtol(text->c_str() + close + 4, nullptr, 10));
  return stat;
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (pid > 0 && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return pids;
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void pause_briefly() { ::poll(nullptr, 0, 10); }

}  // namespace

std::vector<pid_t> list_descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (pid_t pid : all_pids()) {
    if (auto stat = read_stat(pid)) children.emplace(stat->parent, pid);
  }
  std::vector<pid_t> found;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      found.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return found;
}

std::optional<char> process_state(pid_t pid) {
  if (auto stat = read_stat(pid)) return stat->state;
  // The stat file can be unreadable for an instant while a process is torn down.
  if (::access(("/proc/" + std::to_string(pid)).c_str(), F_OK) == 0) return '?';
  return std::nullopt;
}

bool is_gone(pid_t pid) { return !process_state(pid).has_value(); }

bool wait_until_gone(pid_t pid, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  while (!is_gone(pid)) {
    if (now_ms() >= deadline) return false;
    pause_briefly();
  }
  return true;
}

std::vector<pid_t> wait_until_all_gone(const std::vector<pid_t>& pids, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    std::vector<pid_t> left;
    for (pid_t pid : pids) {
      if (!is_gone(pid)) left.push_back(pid);
    }
    if (left.empty() || now_ms() >= deadline) return left;
    pause_briefly();
  }
}

std::vector<pid_t> processes_with_env(const std::string& name, const std::string& value) {
  std::string wanted = name + "=" + value;
  std::vector<pid_t> found;
  for (pid_t pid : all_pids()) {
    auto environ = slurp("/proc/" + std::to_string(pid) + "/environ");
    if (!environ) continue;
    size_t start = 0;
    while (start < environ->size()) {
      size_t end = environ->find('\0', start);
      if (end == std::string::npos) end = environ->size();
      if (environ->compare(start, end - start, wanted) == 0) {
        found.push_back(pid);
        break;
      }
      start = end + 1;
    }
  }
  return found;
}

std::vector<pid_t> processes_of_run(const std::string& run_id) {
  return processes_with_env("DTRAIN_RUN_ID", run_id);
}

std::vector<pid_t> wait_until_run_gone(const std::string& run_id, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    std::vector<pid_t> left = processes_of_run(run_id);
    if (left.empty() || now_ms() >= deadline) return left;
    pause_briefly();
  }
}

std::string describe_process(pid_t pid) {
  auto stat = read_stat(pid);
  if (!stat) return std::to_string(pid) + " (gone)";
  return std::to_string(pid) + " (" + stat->name + ", " + stat->state + ", ppid " +
         std::to_string(stat->parent) + ")";
}

}  // namespace dtrain::test
