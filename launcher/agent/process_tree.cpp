#include "launcher/agent/process_tree.h"

#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "launcher/base/fd.h"

namespace dtrain::agent {
namespace {

// /proc/<pid>/stat is "pid (comm) state ppid ..."; comm may contain spaces and ')', so parse
// from the last ')'.
std::optional<ProcessEntry> read_stat(pid_t pid) {
  Result<std::string> stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 4 > stat->size()) return std::nullopt;
  ProcessEntry entry;
  entry.pid = pid;
  entry.state = (*stat)[close + 2];
  // Fields after the state, counted from 1 at the state (field 3 of proc(5)): ppid is 2,
  // utime..cstime are 12-15, rss (pages) is 22.
  const char* cursor = stat->c_str() + close + 3;  // just past the state letter
  char* end = nullptr;
  long long fields[23] = {};
  for (int field = 2; field <= 22; ++field) {
    fields[field] = std::strtoll(cursor, &end, 10);
    if (end == cursor) break;
    cursor = end;
  }
  entry.parent = static_cast<pid_t>(fields[2]);
  entry.cpu_ticks = fields[12] + fields[13] + fields[14] + fields[15];
  entry.rss_pages = fields[22];
  return entry;
}

}  // namespace

bool proc_shows_own_processes() {
  // Asked each time, not cached: a readlink costs nothing next to a scan, and a forked child may
  // have entered a new pid namespace since.
  char target[PATH_MAX] = {};
  ssize_t length = ::readlink("/proc/self", target, sizeof target - 1);
  if (length <= 0) return false;
  return std::string(target, static_cast<size_t>(length)) == std::to_string(::getpid());
}

std::vector<ProcessEntry> scan_processes() {
  std::vector<ProcessEntry> entries;
  if (!proc_shows_own_processes()) return entries;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return entries;
  while (dirent* item = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(item->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (auto entry = read_stat(static_cast<pid_t>(pid))) entries.push_back(*entry);
  }
  ::closedir(proc);
  return entries;
}

std::vector<ProcessEntry> descendants_of(pid_t root, const std::vector<ProcessEntry>& snapshot) {
  std::multimap<pid_t, const ProcessEntry*> children;
  for (const ProcessEntry& entry : snapshot) children.emplace(entry.parent, &entry);
  std::vector<ProcessEntry> found;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      found.push_back(*it->second);
      frontier.push_back(it->second->pid);
    }
  }
  return found;
}

std::optional<char> process_state(pid_t pid) {
  if (auto entry = read_stat(pid)) return entry->state;
  return std::nullopt;
}

std::optional<std::string> process_environment(pid_t pid) {
  Result<std::string> environ = read_file("/proc/" + std::to_string(pid) + "/environ");
  if (!environ) return std::nullopt;
  return std::move(*environ);
}

std::optional<std::string> environment_value(const std::string& environment, const std::string& name) {
  std::string prefix = name + "=";
  size_t start = 0;
  while (start < environment.size()) {
    size_t end = environment.find('\0', start);
    if (end == std::string::npos) end = environment.size();
    if (environment.compare(start, prefix.size(), prefix) == 0) {
      return environment.substr(start + prefix.size(), end - start - prefix.size());
    }
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> process_environment_value(pid_t pid, const std::string& name) {
  std::optional<std::string> environment = process_environment(pid);
  if (!environment) return std::nullopt;
  return environment_value(*environment, name);
}

}  // namespace dtrain::agent
