#include "launcher/agent/host_facts.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"

namespace dtrain::agent {
namespace {

// Runs a program and returns its stdout, or nullopt if it fails or outlives `timeout_ms`
// (then it is killed). Used only before the agent's loop starts, so waiting on this one pid
// cannot steal another child's exit status.
std::optional<std::string> run_capture(const std::vector<std::string>& argv, int timeout_ms) {
  Result<CommandOutput> ran = run_command(argv, Millis(timeout_ms));
  if (!ran) {
    std::fprintf(stderr, "agent: %s; reporting no GPUs\n", ran.error().message.c_str());
    return std::nullopt;
  }
  if (ran->exit_code != 0) return std::nullopt;
  return ran->out;
}

nlohmann::json parse_gpu_list(const std::string& csv) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const std::string& line : split(csv, '\n')) {
    if (trim(line).empty()) continue;
    std::vector<std::string> fields = split(line, ',');
    if (fields.size() < 2) continue;
    nlohmann::json gpu;
    gpu["index"] = std::atoi(std::string(trim(fields[0])).c_str());
    gpu["name"] = std::string(trim(fields[1]));
    if (fields.size() >= 3) gpu["uuid"] = std::string(trim(fields[2]));
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

int64_t meminfo_mb(const std::string& key) {
  Result<std::string> meminfo = read_file("/proc/meminfo");
  if (!meminfo) return -1;
  return meminfo_field_mb(*meminfo, key).value_or(-1);
}

}  // namespace

std::optional<int64_t> meminfo_field_mb(const std::string& meminfo, const std::string& key) {
  size_t at = meminfo.find(key + ":");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoll(meminfo.c_str() + at + key.size() + 1, nullptr, 10) / 1024;
}

std::optional<std::string> find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (const std::string& directory : split(path ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = (directory.empty() ? "." : directory) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

nlohmann::json collect_host_facts(int nvidia_smi_timeout_ms) {
  nlohmann::json facts;
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  facts["hostname"] = hostname;
  utsname names{};
  if (::uname(&names) == 0) {
    facts["os"] = std::string(names.sysname) + " " + names.release;
    facts["arch"] = names.machine;
  }
  facts["cpus"] = ::sysconf(_SC_NPROCESSORS_ONLN);
  facts["memory_mb"] = meminfo_mb("MemTotal");
  facts["gpus"] = nlohmann::json::array();
  if (std::optional<std::string> nvidia_smi = find_on_path("nvidia-smi")) {
    if (auto csv = run_capture({*nvidia_smi, "--query-gpu=index,name,uuid",
                                "--format=csv,noheader"}, nvidia_smi_timeout_ms)) {
      facts["gpus"] = parse_gpu_list(*csv);
    }
    if (auto topology = run_capture({*nvidia_smi, "topo", "-m"}, nvidia_smi_timeout_ms)) {
      facts["topology"] = *topology;
    }
  }
  return facts;
}

double load_average_1m() {
  Result<std::string> loadavg = read_file("/proc/loadavg");
  if (!loadavg) return -1;
  return std::strtod(loadavg->c_str(), nullptr);
}

int64_t memory_available_mb() { return meminfo_mb("MemAvailable"); }

}  // namespace dtrain::agent
