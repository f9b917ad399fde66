#include "launcher/runlog/run_directory.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dirent.h>
#include <pwd.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/runlog/run_state.h"

namespace dtrain {
namespace {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

std::string home_directory() {
  std::string home = env_or_empty("HOME");
  if (!home.empty()) return home;
  // cron jobs and `env -i` may run without HOME; the passwd entry still knows it.
  if (const passwd* entry = ::getpwuid(::getuid()); entry && entry->pw_dir) return entry->pw_dir;
  return "/tmp";
}

bool is_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// A run id must name a single directory entry: no '/', not "." or "..", not hidden.
bool is_plain_run_id(std::string_view id) {
  if (id.empty() || id.front() == '.') return false;
  return std::all_of(id.begin(), id.end(), is_name_char);
}

bool is_directory(const std::string& path) {
  struct stat info{};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

Result<std::vector<std::string>> list_run_ids() {
  std::vector<std::string> ids;
  std::string root = runs_root();
  DIR* dir = ::opendir(root.c_str());
  if (!dir) {
    if (errno == ENOENT) return ids;
    return Error::infra(root + ": " + errno_text(errno));
  }
  while (const dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (is_plain_run_id(name) && is_directory(root + "/" + name)) ids.push_back(name);
  }
  ::closedir(dir);
  std::sort(ids.begin(), ids.end());
  return ids;
}

int64_t mtime_ms(const std::string& path) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return static_cast<int64_t>(info.st_mtim.tv_sec) * 1000 + info.st_mtim.tv_nsec / 1'000'000;
}

RunSummary summarise(const RunDirectory& run) {
  RunSummary summary;
  summary.id = run.id();
  summary.path = run.path();
  summary.display_state = "unknown";
  summary.started_at_ms = mtime_ms(run.path());
  Result<RunSnapshot> state = read_state(run);
  if (!state) {
    summary.problem = state.error().message;
    return summary;
  }
  summary.name = state->name;
  summary.supervisor_alive = supervisor_alive(*state);
  summary.display_state = display_state(*state, summary.supervisor_alive);
  summary.host_count = static_cast<int>(state->hosts.size());
  summary.world_size = state->world_size;
  if (state->submitted_at_ms) summary.started_at_ms = *state->submitted_at_ms;
  summary.finished_at_ms = state->finished_at_ms;
  summary.exit_code = state->exit_code;
  return summary;
}

}  // namespace

std::string dtrain_home() {
  std::string home = env_or_empty("DTRAIN_HOME");
  if (!home.empty()) return home;
  std::string state_home = env_or_empty("XDG_STATE_HOME");
  if (state_home.empty()) state_home = home_directory() + "/.local/state";
  return state_home + "/dtrain";
}

std::string runs_root() { return dtrain_home() + "/runs"; }

std::string make_run_id(std::string_view job_name, int64_t wall_ms) {
  std::string name;
  for (char c : job_name) {
    if (name.size() == 40) break;
    char safe = is_name_char(c) ? c : '-';
    if (name.empty() && (safe == '.' || safe == '-')) continue;  // no hidden or option-like ids
    name += safe;
  }
  if (name.empty()) name = "job";
  std::time_t seconds = static_cast<std::time_t>(wall_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  std::random_device random;
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "-%04d%02d%02d-%02d%02d%02d-%04x", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<unsigned>(random() & 0xffff));
  return name + suffix;
}

std::string short_id(std::string_view run_id) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : run_id) {
    hash ^= c;
    hash *= 16777619u;
  }
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%08x", hash);
  return buffer;
}

Status make_directories(const std::string& path, int mode) {
  if (path.empty()) return Error::internal("make_directories: empty path");
  size_t position = 0;
  while (position != std::string::npos) {
    position = path.find('/', position + 1);
    std::string prefix = path.substr(0, position);
    if (prefix.empty() || is_directory(prefix)) continue;
    if (::mkdir(prefix.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      return Error::infra(prefix + ": cannot create directory: " + errno_text(errno) +
                          "; set DTRAIN_HOME to a writable directory");
    }
  }
  return {};
}

Result<RunDirectory> RunDirectory::create(const std::string& run_id) {
  if (!is_plain_run_id(run_id)) {
    return Error::internal("run id '" + run_id + "' is not a plain name (use make_run_id)");
  }
  std::string root = runs_root();
  if (Status made = make_directories(root); !made) return made.error();
  std::string path = root + "/" + run_id;
  if (::mkdir(path.c_str(), 0700) != 0) {
    if (errno == EEXIST) return Error::infra(path + ": run directory already exists");
    return Error::infra(path + ": cannot create run directory: " + errno_text(errno));
  }
  RunDirectory run(path, run_id);
  for (const std::string& sub : {run.ranks_dir(), run.hosts_dir()}) {
    if (::mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST) {
      return Error::infra(sub + ": cannot create directory: " + errno_text(errno));
    }
  }
  return run;
}

Result<RunDirectory> RunDirectory::open(std::string_view id_or_unique_prefix) {
  std::string wanted(id_or_unique_prefix);
  std::string root = runs_root();
  const std::string fix = "; `dtrain status` lists runs";
  if (wanted.empty()) return Error::user("empty run id" + fix);
  if (is_plain_run_id(wanted) && is_directory(root + "/" + wanted)) {
    return RunDirectory(root + "/" + wanted, wanted);
  }
  Result<std::vector<std::string>> ids = list_run_ids();
  if (!ids) return ids.error();
  std::vector<std::string> matches;
  for (const std::string& id : *ids) {
    if (starts_with(id, wanted)) matches.push_back(id);
  }
  if (matches.size() == 1) return RunDirectory(root + "/" + matches[0], matches[0]);
  if (matches.empty()) {
    std::string message = "no run '" + wanted + "' in " + root;
    if (std::string near = closest_match(wanted, *ids); !near.empty()) {
      message += "; did you mean '" + near + "'?";
    }
    return Error::user(message + fix);
  }
  const size_t shown = 10;
  std::string list = join(std::vector<std::string>(matches.begin(),
                                                   matches.begin() + std::min(shown, matches.size())),
                          ", ");
  if (matches.size() > shown) list += ", ... (" + std::to_string(matches.size() - shown) + " more)";
  return Error::user("run id prefix '" + wanted + "' is ambiguous: it matches " + list +
                     "; give more characters of the id");
}

Result<std::vector<RunSummary>> RunDirectory::list_runs() {
  Result<std::vector<std::string>> ids = list_run_ids();
  if (!ids) return ids.error();
  std::vector<RunSummary> runs;
  std::string root = runs_root();
  for (const std::string& id : *ids) runs.push_back(summarise(RunDirectory(root + "/" + id, id)));
  std::stable_sort(runs.begin(), runs.end(), [](const RunSummary& a, const RunSummary& b) {
    return a.started_at_ms < b.started_at_ms;
  });
  return runs;
}

RunDirectory RunDirectory::at(std::string path, std::string run_id) {
  return RunDirectory(std::move(path), std::move(run_id));
}

Result<std::string> RunDirectory::read_host_facts(std::string_view host) const {
  return read_regular_file(host_facts_path(host), kMaxHostFactsBytes, FollowLinks::kNo,
                           "a host's facts are a few kB; this is not a file of the run");
}

std::string RunDirectory::host_facts_path(std::string_view host) const {
  std::string safe;
  for (char c : host) safe += is_name_char(c) ? c : '_';
  if (safe.empty() || safe.front() == '.') safe.insert(safe.begin(), '_');
  return hosts_dir() + "/" + safe + ".json";
}

std::string RunDirectory::runtime_dir() const { return default_runtime_base() + "/" + short_id(id_); }

Result<RuntimeDirectoryChoice> RunDirectory::create_runtime_dir() const { return open_runtime_directory(runtime_dir()); }

Status RunDirectory::link_control_socket(const std::string& socket_path) const {
  std::string link = ctl_link_path();
  ::unlink(link.c_str());  // a stale link from a supervisor that died
  if (::symlink(socket_path.c_str(), link.c_str()) != 0) {
    return Error::infra(link + ": cannot link to " + socket_path + ": " + errno_text(errno));
  }
  return {};
}

void RunDirectory::unlink_control_socket() const { ::unlink(ctl_link_path().c_str()); }

std::vector<int> RunDirectory::ranks_with_logs() const {
  std::vector<int> ranks;
  DIR* dir = ::opendir(ranks_dir().c_str());
  if (!dir) return ranks;
  while (const dirent* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name.size() < 5 || name.substr(name.size() - 4) != ".log") continue;
    std::string_view digits = name.substr(0, name.size() - 4);
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    ranks.push_back(std::stoi(std::string(digits)));
  }
  ::closedir(dir);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

}  // namespace dtrain
