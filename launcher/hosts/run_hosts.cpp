#include "launcher/hosts/run_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <charconv>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"
#include "launcher/base/strings.h"
#include "launcher/spec/spec_loader.h"
#include "launcher/transport/ssh_exec.h"
#include "launcher/base/json_fields.h"

namespace dtrain::hosts {

namespace {

std::string pid_list(const std::vector<int>& pids) {
  std::string text;
  for (int pid : pids) text += (text.empty() ? "" : " ") + std::to_string(pid);
  return text;
}

std::vector<int> parse_pids(const std::string& text) {
  std::vector<int> pids;
  for (const std::string& line : split(text, '\n')) {
    std::string_view word = trim(line);
    int pid = 0;
    auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), pid);
    if (error == std::errc() && end == word.data() + word.size() && pid > 0) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

transport::SshOptions ssh_options_for(const spec::JobSpec& job) {
  transport::SshOptions options;
  options.user = job.ssh.user;
  options.port = job.ssh.port;
  options.identity_files = job.ssh.identity;
  options.known_hosts = job.ssh.known_hosts;
  options.host_key_policy = job.ssh.host_key_policy;
  options.connect_timeout = job.ssh.connect_timeout;
  options.max_parallel = job.ssh.max_parallel;
  options.remote_dtrain = job.ssh.remote_dtrain;
  options.client = job.ssh.client;
  options.openssh_config = job.ssh.config;
  return options;
}

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

std::string still_running_script(const std::vector<int>& pids, const std::string& run_id) {
  // /proc/<pid>/stat's state follows the last ')': a zombie (Z) is dead, whoever reaps it.
  return "for p in " + pid_list(pids) +
         "; do\n"
         "  s=$(cat /proc/$p/stat 2>/dev/null) || continue\n"
         "  case \"${s##*) }\" in Z*|X*) continue;; esac\n"
         "  if tr '\\0' '\\n' </proc/$p/environ 2>/dev/null | grep -qxF " +
         shell_quote("DTRAIN_RUN_ID=" + run_id) +
         " || tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q ' agent'; then echo $p; fi\n"
         "done\n"
         "exit 0\n";
}

Result<RunHosts> RunHosts::open(const RunDirectory& directory) {
  // Hosts and ssh settings only: no env_file or pass_env value is needed to reach the hosts.
  spec::LoadResult loaded = spec::load_job_spec(directory.spec_path(), {}, spec::EnvValues::names_only);
  if (!loaded.ok()) {
    return Error::infra("run " + directory.id() + ": its saved spec " + directory.spec_path() +
                        " does not load, so its hosts cannot be reached:\n" + loaded.message());
  }
  return RunHosts(directory, std::move(*loaded.spec));
}

const spec::HostEntry* RunHosts::entry(const std::string& host) const {
  for (const auto* list : {&spec_.hosts, &spec_.spares}) {
    for (const spec::HostEntry& candidate : *list) {
      if (candidate.name == host) return &candidate;
    }
  }
  return nullptr;
}

std::vector<std::string> RunHosts::names() const {
  std::vector<std::string> names;
  for (const auto* list : {&spec_.hosts, &spec_.spares}) {
    for (const spec::HostEntry& host : *list) names.push_back(host.name);
  }
  return names;
}

bool RunHosts::is_local(const std::string& host) const {
  const spec::HostEntry* found = entry(host);
  return found ? found->is_local() : host == "localhost";
}

std::optional<int> RunHosts::agent_pid(const std::string& host) const {
  Result<std::string> text = directory_.read_host_facts(host);
  if (!text) return std::nullopt;
  nlohmann::json facts = nlohmann::json::parse(*text, nullptr, false);
  // A hand-edited or half-written hosts/<host>.json must not throw: read the pid checked.
  int64_t pid = json_int(facts, "agent_pid").value_or(0);
  return pid > 1 && pid <= INT32_MAX ? std::optional<int>(static_cast<int>(pid)) : std::nullopt;
}

Result<CommandOutput> RunHosts::shell(const std::string& host, const std::string& command, Millis timeout) const {
  if (is_local(host)) return run_command({"/bin/sh", "-c", command}, timeout);
  const spec::HostEntry* found = entry(host);
  transport::AgentTarget target;
  target.host = host;
  if (found) {
    target.user = found->user;
    target.port = found->port;
  }
  Result<transport::RemoteCommandResult> ran = transport::ssh_exec(ssh_options_for(spec_), target, command, timeout);
  if (!ran) return ran.error();
  CommandOutput output;
  output.exit_code = ran->exit_signal.empty() ? ran->exit_code : 128 + 9;
  output.out = ran->output;
  output.err = ran->diagnostics;
  return output;
}

Result<int64_t> RunHosts::kill_all(const std::string& host, int agent_pid, const std::vector<int>& worker_pids) const {
  if (is_local(host)) {
    // Pids from the run directory, not our children: each is taken once, now, and skipped when
    // it is gone (a worker dies with its agent; its number may be someone else's a moment later).
    if (agent_pid > 1) {
      if (Result<ProcessHandle> agent = ProcessHandle::for_process(agent_pid); agent) (void)send_signal(*agent, SIGKILL);
    }
    int64_t at = SystemClock().wall_ms();
    for (int pid : worker_pids) {
      if (pid <= 1) continue;
      Result<ProcessHandle> worker = ProcessHandle::for_process(pid);
      if (!worker) continue;
      (void)send_signal(*worker, SIGKILL, SignalScope::group);  // whatever the worker started
      (void)send_signal(*worker, SIGKILL);
    }
    return at;
  }
  // One command, agent first; `date` stamps the kill on the host's clock (GNU date: ms).
  std::string script = "t=$(date +%s%3N)\nkill -KILL " + std::to_string(agent_pid) + " 2>/dev/null\n";
  for (int pid : worker_pids) {
    script += "kill -KILL -" + std::to_string(pid) + " 2>/dev/null; kill -KILL " + std::to_string(pid) +
              " 2>/dev/null\n";
  }
  script += "echo \"$t\"\n";
  int64_t before = SystemClock().wall_ms();
  Result<CommandOutput> ran = shell(host, script, Millis(30'000));
  int64_t after = SystemClock().wall_ms();
  if (!ran) return Error::infra("kill-host " + host + ": " + ran.error().message);
  int64_t stamped = 0;
  std::string_view text = trim(ran->out);
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), stamped);
  bool sane = error == std::errc() && end == text.data() + text.size() && stamped >= before - 1000 && stamped <= after;
  return sane ? stamped : after;
}

Result<std::vector<int>> RunHosts::still_running(const std::string& host, const std::vector<int>& pids,
                                                 const std::string& run_id) const {
  std::vector<int> wanted;
  for (int pid : pids) {
    if (pid > 1) wanted.push_back(pid);
  }
  if (wanted.empty()) return wanted;
  Result<CommandOutput> ran = shell(host, still_running_script(wanted, run_id), Millis(20'000));
  if (!ran) return ran.error();
  if (ran->exit_code != 0) {
    return Error::infra(host + ": the process check failed (exit " + std::to_string(ran->exit_code) + "): " +
                        std::string(trim(ran->err)));
  }
  return parse_pids(ran->out);
}

}  // namespace dtrain::hosts
