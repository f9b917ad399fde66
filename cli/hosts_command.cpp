// `dtrain hosts SPEC [--json] [--set key=value]...`: preflight of every host of a job, in
// parallel through one poll loop: how it is reached (VIA: local, libssh2, or openssh as
// ssh.client says), SSH and its latency, host key status,
// user, remote dtrain (or "will be copied"), GPUs, GPU topology, free space at checkpoint.dir,
// clock offset to this machine, and the software stack compared across the hosts as the run
// would (spec consistency; hosts_stack.h), and the host's health checks as an agent would make them
// before the first generation (spec health; hosts_health.h). Exit 0 only when every host can run the job; otherwise 3, with
// each failing host's reason and fix. localhost entries are checked here, without ssh. With
// transport: srun every host (VIA srun) is checked through one srun step, as its agent would start.
// With hosts: kubernetes, the kubeconfig user's permissions and the selector's pods instead
// (hosts_kubernetes.h).
//
// `dtrain hosts --reliability [--since D] [--until D] [--json]` (no spec): each host's record in
// the run registry: hours held, failures (root causes / all), root-cause failures per 1,000
// hours, times lost and excluded, the last exclusion and why. See man/dtrain-registry.1.

#include <poll.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/hosts_health.h"
#include "cli/hosts_kubernetes.h"
#include "cli/hosts_quarantine.h"
#include "cli/hosts_stack.h"
#include "launcher/base/child_process.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/registry/registry_usage.h"
#include "launcher/base/clock.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/spec/spec_loader.h"
#include "launcher/transport/openssh_transport.h"
#include "launcher/transport/srun_transport.h"
#include "launcher/transport/ssh_transport.h"

namespace dtrain::cli {
namespace {

struct HostsOptions {
  std::string spec_path;
  std::vector<std::string> overrides;
  bool json = false;
  bool reliability = false;
  std::string since;
  std::string until;
};

/// One host's findings.
struct HostReport {
  spec::HostEntry entry;
  bool local = false;
  std::string via;              // "local", "libssh2", "openssh": how the job reaches it
  std::unique_ptr<transport::SshConnection> connection;        // ssh.client: libssh2
  std::unique_ptr<transport::OpensshConnection> openssh;       // ssh.client: openssh
  std::string output;           // the facts script's stdout
  int64_t sent_wall_ms = -1;    // when the script started (for the clock offset)
  int64_t received_wall_ms = -1;
  // results
  bool ok = true;
  std::string ssh = "ok";
  int64_t latency_ms = -1;
  std::string host_key = "-";
  std::string user;
  std::string dtrain;
  std::string os;
  std::vector<std::string> gpus;
  std::string topology = "-";
  std::string free_dir;
  int64_t free_bytes = -1;
  int64_t clock_offset_ms = 0;
  std::string stack = "-";      // the software stack: same, DIFFERS, unknown, - (hosts_stack.h)
  std::optional<events::HostStack> stack_items;
  HostHealth health;            // the agent's checks (hosts_health.h)
  std::vector<std::string> problems;  // "what; fix: ..."
  std::vector<std::string> warnings;
};

/// The facts script, run with /bin/sh on each host. One "key value" per line.
std::string facts_script(const spec::JobSpec& job) {
  std::string checkpoint_dir = job.checkpoint.dir;
  return "v=" + shell_quote(kVersion) + "; p=" + shell_quote(job.ssh.remote_dtrain) +
         "; d=" + shell_quote(checkpoint_dir) + "; s=" +
         "\n"
         "echo \"time_ms $(date +%s%3N)\"\n"
         "echo \"user $(id -un)\"\n"
         "echo \"os $(uname -s) $(uname -m)\"\n"
         "[ -n \"$p\" ] || p=$(command -v dtrain 2>/dev/null)\n"
         "if [ -n \"$p\" ] && [ -x \"$p\" ]; then echo \"dtrain_path $p\"; "
         "echo \"dtrain_version $(\"$p\" --version 2>/dev/null | head -n 1)\"; fi\n"
         "c=\"$HOME/.cache/dtrain/$v/dtrain\"\n"
         "if [ -x \"$c\" ]; then echo \"cache_version $(\"$c\" --version 2>/dev/null | head -n 1)\"; fi\n"
         "if command -v nvidia-smi >/dev/null 2>&1; then\n"
         "  nvidia-smi -L 2>/dev/null | sed 's/^/gpu /'\n"
         "  if nvidia-smi topo -m >/dev/null 2>&1; then echo 'topology yes'; else echo 'topology no'; fi\n"
         "else echo 'topology none'; fi\n"
         "[ -n \"$d\" ] || d=\"$HOME\"\n"
         "while [ ! -e \"$d\" ] && [ \"$d\" != / ] && [ \"$d\" != . ]; do d=$(dirname \"$d\"); done\n"
         "echo \"free_dir $d\"\n"
         "df -Pk \"$d\" 2>/dev/null | awk 'NR==2 {print \"free_kb \" $4}'\n" +
         stack_script_part(job) + health_script_part(job) + "exit 0\n";
}

std::vector<std::string> values_of(const std::string& output, const std::string& key) {
  std::vector<std::string> values;
  for (const std::string& line : split(output, '\n')) {
    if (starts_with(line, key + " ")) values.push_back(line.substr(key.size() + 1));
  }
  return values;
}
std::string value_of(const std::string& output, const std::string& key) {
  auto values = values_of(output, key);
  return values.empty() ? std::string() : values.front();
}

std::string local_os() {
  utsname names{};
  return ::uname(&names) == 0 ? std::string(names.sysname) + " " + names.machine : "unknown";
}

/// Runs the facts script here (localhost entries: no sshd needed).
void check_locally(HostReport& report, const std::string& script, const Clock& clock) {
  report.ssh = "local";
  report.host_key = "-";
  report.sent_wall_ms = clock.wall_ms();
  // Bounded like a remote host's check: a facts script that hangs here must not hang the command.
  // $x: this binary fingerprints the stack here (hosts_stack.h).
  Result<CommandOutput> ran = run_command({"/bin/sh", "-c", "x=" + shell_quote(this_executable()) + "\n" + script},
                                          Millis(30'000));
  if (!ran) {
    report.problems.push_back("the facts script: " + ran.error().message);
    return;
  }
  report.output = ran->out;
  report.received_wall_ms = clock.wall_ms();
}

/// transport: srun: the facts script on every host as one srun step, as the agents would start.
void check_over_srun(std::vector<HostReport>& reports, const std::string& script, const Clock& clock) {
  std::vector<std::string> hosts;
  for (const HostReport& report : reports) hosts.push_back(report.entry.name);
  int64_t sent = clock.wall_ms();
  auto outputs = transport::run_on_each_node("srun", hosts, script, 60'000);
  int64_t received = clock.wall_ms();
  for (HostReport& report : reports) {
    report.ssh = "srun";
    report.host_key = "-";
    if (!outputs) {
      report.problems.push_back(report.entry.name + ": " + outputs.error().message);
      continue;
    }
    auto found = outputs->find(report.entry.name);
    if (found == outputs->end()) {
      report.problems.push_back(report.entry.name + ": srun started no task there (is it a node of this "
                                                    "allocation? squeue -j $SLURM_JOB_ID)");
      continue;
    }
    report.output = found->second;
    // One step for all: its whole time stands for each host's round trip.
    report.sent_wall_ms = sent;
    report.received_wall_ms = received;
  }
}

transport::SshOptions ssh_options(const spec::JobSpec& job, const std::string& script) {
  transport::SshOptions options = hosts::ssh_options_for(job);
  options.remote_dtrain.clear();
  options.remote_command = "exec /bin/sh -c " + shell_quote(script);
  return options;
}

/// The report's connection, whichever client made it; nullptr for local hosts.
transport::AgentConnection* connection_of(const HostReport& report) {
  if (report.connection) return report.connection.get();
  return report.openssh.get();
}

int64_t next_deadline_of(const HostReport& report) {
  return report.connection ? report.connection->next_deadline_ms() : report.openssh->next_deadline_ms();
}

/// Drives every SSH check through one poll loop until all are done.
void check_over_ssh(std::vector<HostReport>& reports, const Clock& clock) {
  for (;;) {
    bool pending = false;
    std::vector<pollfd> fds;
    int64_t next_deadline = -1;
    for (HostReport& report : reports) {
      transport::AgentConnection* connection = connection_of(report);
      if (!connection || connection->closed()) continue;
      pending = true;
      for (const pollfd& fd : connection->poll_fds()) fds.push_back(fd);
      int64_t deadline = next_deadline_of(report);
      if (deadline >= 0 && (next_deadline < 0 || deadline < next_deadline)) next_deadline = deadline;
    }
    if (!pending) return;
    int wait_ms = 100;  // also lets queued connections start when others finish setup
    if (next_deadline >= 0) wait_ms = static_cast<int>(std::clamp<int64_t>(next_deadline - clock.monotonic_ms(), 0, 100));
    ::poll(fds.data(), fds.size(), wait_ms);
    for (HostReport& report : reports) {
      transport::AgentConnection* connection = connection_of(report);
      if (!connection || connection->closed()) continue;
      connection->pump();
      // openssh: the script runs as soon as ssh does; its clock reading is the first bytes.
      bool running = report.connection ? report.connection->phase() == transport::SshPhase::running
                                       : report.openssh->started();
      if (report.sent_wall_ms < 0 && running) report.sent_wall_ms = clock.wall_ms();
      std::string bytes = connection->take_received();
      if (!bytes.empty() && report.received_wall_ms < 0) report.received_wall_ms = clock.wall_ms();
      report.output += bytes;
      connection->take_diagnostics();
    }
  }
}

std::string human_bytes(int64_t bytes) {
  char text[32];
  if (bytes < 0) return "?";
  if (bytes >= (int64_t(1) << 30)) std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(int64_t(1) << 30));
  else std::snprintf(text, sizeof text, "%.0f MiB", double(bytes) / double(1 << 20));
  return text;
}

/// Turns the raw findings into verdicts with reasons and fixes.
void evaluate(HostReport& report, const spec::JobSpec& job, const std::string& this_os) {
  if (report.openssh) {
    // ssh ran the script only after it accepted the host key (StrictHostKeyChecking from
    // ssh.host_key_policy); it does not tell us which file or line vouched for it.
    report.host_key = std::string("checked by ssh (") + to_string(job.ssh.host_key_policy) + ")";
    if (report.openssh->failed()) {
      report.ok = false;
      report.ssh = "FAILED";
      report.problems.push_back(report.openssh->close_reason());
      return;
    }
    // From starting ssh to the script's first line: connection, authentication and all. (The
    // clock offset below is then only good to about half of that, far inside its 1 s warning.)
    if (report.sent_wall_ms >= 0 && report.received_wall_ms >= 0) {
      report.latency_ms = report.received_wall_ms - report.sent_wall_ms;
    }
  }
  if (report.connection) {
    const auto& info = report.connection->info();
    report.host_key = info.host_key_status.empty() ? "-" : info.host_key_status;
    if (report.connection->failed()) {
      report.ok = false;
      report.ssh = "FAILED";
      report.problems.push_back(report.connection->close_reason());
      return;
    }
    report.latency_ms = info.ready_ms;
  }
  const std::string& out = report.output;
  if (value_of(out, "time_ms").empty()) {
    report.ok = false;
    transport::AgentConnection* connection = connection_of(report);
    report.problems.push_back(report.entry.name + ": the facts script produced no output" +
                              (connection ? " (" + connection->close_reason() + ")" : std::string()));
    return;
  }
  report.user = value_of(out, "user");
  report.os = value_of(out, "os");
  std::string wanted = std::string("dtrain ") + kVersion;
  std::string found = value_of(out, "dtrain_version");
  if (!job.ssh.remote_dtrain.empty()) {
    if (found == wanted || report.local) {
      report.dtrain = std::string(kVersion) + " (" + job.ssh.remote_dtrain + ")";
    } else {
      report.problems.push_back(report.entry.name + ": ssh.remote_dtrain '" + job.ssh.remote_dtrain + "' is " +
                                (found.empty() ? std::string("missing or not executable") : "'" + found + "'") +
                                " there, not " + wanted + "; fix: install dtrain " + kVersion +
                                " there, or leave ssh.remote_dtrain empty so that dtrain copies itself");
    }
  } else if (report.local) {
    report.dtrain = std::string(kVersion) + " (this binary)";
  } else if (found == wanted) {
    report.dtrain = std::string(kVersion) + " (" + value_of(out, "dtrain_path") + ")";
  } else if (value_of(out, "cache_version") == wanted) {
    report.dtrain = std::string(kVersion) + " (cached)";
  } else if (report.os == this_os) {
    report.dtrain = "will be copied";
  } else {
    report.problems.push_back(report.entry.name + ": no dtrain " + kVersion + " there, and the host runs '" + report.os +
                              "' while this dtrain is built for '" + this_os + "', so it cannot be copied; fix: "
                              "install dtrain " + kVersion + " there and set ssh.remote_dtrain");
  }
  report.gpus = values_of(out, "gpu");
  std::string topology = value_of(out, "topology");
  report.topology = topology == "none" ? "-" : topology;
  int slots = report.entry.slots > 0 ? report.entry.slots : job.slots_per_host;
  if (job.worker.backend == spec::Backend::nccl && static_cast<int>(report.gpus.size()) < slots) {
    report.problems.push_back(report.entry.name + ": worker.backend is nccl and the host has " +
                              std::to_string(report.gpus.size()) + " GPU(s) for " + std::to_string(slots) +
                              " slot(s) (nvidia-smi -L); fix: lower its slots, use backend gloo, or drop the host");
  }
  report.free_dir = value_of(out, "free_dir");
  std::string free_kb = value_of(out, "free_kb");
  if (!free_kb.empty()) report.free_bytes = std::atoll(free_kb.c_str()) * 1024;
  if (job.checkpoint.interval_steps > 0 && report.free_bytes >= 0 && report.free_bytes < (int64_t(1) << 30)) {
    report.warnings.push_back(report.entry.name + ": only " + human_bytes(report.free_bytes) + " free at " +
                              report.free_dir + " (checkpoint.dir)");
  }
  if (!report.local && report.sent_wall_ms >= 0 && report.received_wall_ms >= 0) {
    int64_t remote = std::atoll(value_of(out, "time_ms").c_str());
    report.clock_offset_ms = remote - (report.sent_wall_ms + report.received_wall_ms) / 2;
    if (std::llabs(report.clock_offset_ms) > 1000) {
      report.warnings.push_back(report.entry.name + ": clock is " + std::to_string(report.clock_offset_ms) +
                                " ms off this machine's; dtrain corrects event times, but fix: run chrony or ntpd");
    }
  }
  report.ok = report.problems.empty();
}

nlohmann::json to_json(const HostReport& report) {
  return {{"host", report.entry.name},
          {"ok", report.ok},
          {"via", report.via},
          {"ssh", report.ssh},
          {"latency_ms", report.latency_ms},
          {"host_key", report.host_key},
          {"user", report.user},
          {"dtrain", report.dtrain},
          {"os", report.os},
          {"gpus", report.gpus},
          {"topology", report.topology},
          {"free_dir", report.free_dir},
          {"free_bytes", report.free_bytes},
          {"clock_offset_ms", report.clock_offset_ms},
          {"stack", report.stack},
          {"stack_items", report.stack_items ? report.stack_items->to_json()["items"] : nlohmann::json(nullptr)},
          {"health", report.health.verdict},
          {"health_report", report.health.report ? proto::to_json(*report.health.report) : nlohmann::json(nullptr)},
          {"problems", report.problems},
          {"warnings", report.warnings}};
}

void print_table(const std::vector<HostReport>& reports) {
  std::printf("%-16s %-8s %-14s %-10s %-10s %-24s %-5s %-5s %-12s %-8s %-8s %s\n", "HOST", "VIA", "SSH", "HOST KEY",
              "USER", "DTRAIN", "GPUS", "TOPO", "FREE(CKPT)", "CLOCK", "STACK", "HEALTH");
  for (const HostReport& report : reports) {
    std::string ssh = report.ssh;
    if (report.latency_ms >= 0) ssh += " " + std::to_string(report.latency_ms) + "ms";
    std::string key = report.host_key;
    key = key.substr(0, key.find(' '));  // "known", "recorded", "NOT", "-"
    if (key == "NOT") key = "UNCHECKED";
    if (key == "checked") key = "by-ssh";
    std::string clock = report.local ? "0ms" : (report.clock_offset_ms >= 0 ? "+" : "") + std::to_string(report.clock_offset_ms) + "ms";
    std::printf("%-16s %-8s %-14s %-10s %-10s %-24s %-5zu %-5s %-12s %-8s %-8s %s\n", report.entry.name.c_str(),
                report.via.c_str(), ssh.c_str(), key.c_str(), report.user.empty() ? "-" : report.user.c_str(),
                report.dtrain.empty() ? "-" : report.dtrain.c_str(), report.gpus.size(), report.topology.c_str(),
                report.free_bytes < 0 ? "-" : human_bytes(report.free_bytes).c_str(),
                report.ok && report.ssh != "FAILED" ? clock.c_str() : "-", report.stack.c_str(),
                report.health.verdict.c_str());
  }
  for (const HostReport& report : reports) {
    for (const std::string& warning : report.warnings) std::printf("warning: %s\n", warning.c_str());
  }
}

/// The software stacks of the hosts that answered, compared (hosts_stack.h): each host's
/// verdict, and its differences as problems (strict) or warnings (warn).
std::optional<events::StackConsistency> check_stacks(const spec::JobSpec& job, std::vector<HostReport>& reports) {
  std::vector<StackFinding> findings;
  for (const HostReport& report : reports) {
    StackFinding finding;
    finding.host = report.entry.name;
    finding.spare = report.entry.spare;
    finding.output = report.output;
    findings.push_back(std::move(finding));
  }
  std::optional<events::StackConsistency> verdict = check_host_stacks(job, findings);
  for (size_t i = 0; i < reports.size(); ++i) {
    HostReport& report = reports[i];
    StackFinding& finding = findings[i];
    report.stack = finding.verdict;
    report.stack_items = std::move(finding.stack);
    report.problems.insert(report.problems.end(), finding.problems.begin(), finding.problems.end());
    report.warnings.insert(report.warnings.end(), finding.warnings.begin(), finding.warnings.end());
    report.ok = report.problems.empty();
  }
  return verdict;
}

/// Each host's health checks (hosts_health.h): failed checks are problems (a run keeps the host
/// out), warned ones warnings.
void check_health(const spec::JobSpec& job, std::vector<HostReport>& reports) {
  for (HostReport& report : reports) {
    report.health = read_host_health(job, report.entry.name, report.output);
    report.problems.insert(report.problems.end(), report.health.problems.begin(), report.health.problems.end());
    report.warnings.insert(report.warnings.end(), report.health.warnings.begin(), report.health.warnings.end());
    report.ok = report.problems.empty();
  }
}

/// Every host's checks, one line each, under the table.
void print_health_checks(const spec::JobSpec& job, const std::vector<HostReport>& reports) {
  if (!job.health.enabled) return;
  std::vector<std::string> lines;
  for (const HostReport& report : reports) {
    if (!report.health.report) continue;
    for (std::string& line : health_check_lines(report.entry.name, *report.health.report)) lines.push_back(std::move(line));
  }
  if (lines.empty()) return;
  std::printf("\nhealth checks (as an agent makes them before the first generation; spec health):\n");
  for (const std::string& line : lines) std::printf("  %s\n", line.c_str());
}

/// What differs, side by side, under the table.
void print_stack_differences(const std::optional<events::StackConsistency>& verdict) {
  if (!verdict || verdict->differences.empty()) return;
  std::printf("\nsoftware stacks differ (consistency: %s):\n", verdict->mode.c_str());
  for (const std::string& line : events::stack_difference_table(verdict->differences)) {
    std::printf("  %s\n", printable(line).c_str());
  }
}

int reliability_failure(const Error& error) {
  std::fprintf(stderr, "dtrain hosts --reliability: %s\n", error.message.c_str());
  return exit_code_for(error);
}

/// Hosts that held less than this in the period show no rate in the table (one failure in a few
/// minutes reads as tens of thousands per 1,000 hours); --json gives it all the same.
constexpr double kMinHoursForRateText = 1.0;

std::string per_1000_text(const registry::HostReliability& host) {
  std::optional<double> rate = host.root_failures_per_1000_hours();
  if (!rate) return "-";
  if (host.unit_hours() < kMinHoursForRateText) return "<1 h held";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", *rate);
  return text;
}

int show_reliability(const HostsOptions& options) {
  Result<registry::Period> period = registry::parse_period(options.since, options.until);
  if (!period) return reliability_failure(period.error());
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) return reliability_failure(db.error());
  Result<std::vector<registry::HostReliability>> hosts =
      registry::host_reliability(*db, {period->since_ms, period->until_ms, SystemClock().wall_ms()});
  if (!hosts) return reliability_failure(hosts.error());
  if (options.json) {
    nlohmann::json out = {{"since", options.since.empty() ? nullptr : nlohmann::json(options.since)},
                          {"until", options.until.empty() ? nullptr : nlohmann::json(options.until)},
                          {"registry", db->path()}, {"hosts", nlohmann::json::array()}};
    for (const registry::HostReliability& host : *hosts) {
      std::optional<double> rate = host.root_failures_per_1000_hours();
      out["hosts"].push_back(
          {{"host", host.host}, {"gpu_hours", host.gpu_hours}, {"slot_hours", host.slot_hours},
           {"failures", host.failures}, {"root_cause_failures", host.root_cause_failures},
           {"root_cause_failures_per_1000_hours", rate ? nlohmann::json(*rate) : nlohmann::json(nullptr)},
           {"times_lost", host.times_lost}, {"times_excluded", host.times_excluded},
           {"last_excluded", host.last_excluded_ms ? nlohmann::json(format_timestamp_utc(*host.last_excluded_ms))
                                                   : nlohmann::json(nullptr)},
           {"last_excluded_reason", host.last_excluded_reason}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("Host reliability, %s to %s (UTC)\n", options.since.empty() ? "the beginning" : options.since.c_str(),
              options.until.empty() ? "now" : options.until.c_str());
  std::printf("HOURS: GPU-hours held (slot-hours on CPU hosts). FAILURES: the host's root causes / all on it (a\n"
              "cascade is counted, not blamed). PER 1,000 H: root-cause failures per 1,000 hours held\n"
              "(not shown for a host that held less than an hour).\n");
  if (hosts->empty()) {
    std::printf("no hosts in this period\n");
    return 0;
  }
  int host_width = 4;
  for (const registry::HostReliability& host : *hosts) host_width = std::max(host_width, static_cast<int>(host.host.size()));
  std::printf("%-*s %-4s %10s %10s %11s %5s %8s  %-19s %s\n", host_width, "HOST", "UNIT", "HOURS", "FAILURES", "PER 1,000 H",
              "LOST", "EXCLUDED", "LAST EXCLUDED (UTC)", "REASON");
  for (const registry::HostReliability& host : *hosts) {
    const char* unit = host.unit_hours() <= 0 ? "-" : host.gpu_hours >= host.slot_hours ? "GPU" : "slot";
    std::string failures = std::to_string(host.root_cause_failures) + "/" + std::to_string(host.failures);
    std::string last = host.last_excluded_ms ? registry::format_time_utc(*host.last_excluded_ms) : "-";
    std::printf("%-*s %-4s %10.2f %10s %11s %5d %8d  %-19s %s\n", host_width, host.host.c_str(), unit,
                host.unit_hours(), failures.c_str(), per_1000_text(host).c_str(), host.times_lost,
                host.times_excluded, last.c_str(), host.last_excluded_reason.empty() ? "-" : host.last_excluded_reason.c_str());
  }
  return 0;
}

int run_hosts(const HostsOptions& options) {
  // --reliability reads the registry; without it the preflight needs a job spec.
  if (options.reliability) {
    if (!options.spec_path.empty() || !options.overrides.empty()) {
      std::fprintf(stderr, "dtrain hosts --reliability reads the run registry and takes no job spec or --set; "
                           "run `dtrain hosts SPEC` for the preflight\n");
      return to_int(ExitCode::usage);
    }
    return show_reliability(options);
  }
  if (options.spec_path.empty()) {
    std::fprintf(stderr, "dtrain hosts: give a job spec (`dtrain hosts job.yaml`), or --reliability for the hosts' "
                         "record in the run registry\n");
    return to_int(ExitCode::usage);
  }
  if (!options.since.empty() || !options.until.empty()) {
    std::fprintf(stderr, "dtrain hosts: --since and --until go with --reliability\n");
    return to_int(ExitCode::usage);
  }
  std::vector<spec::Override> overrides;
  for (const std::string& text : options.overrides) {
    auto parsed = spec::parse_override(text);
    if (!parsed) {
      std::fprintf(stderr, "%s\n", parsed.error().message.c_str());
      return to_int(ExitCode::usage);
    }
    overrides.push_back(*parsed);
  }
  spec::LoadResult loaded = spec::load_job_spec(options.spec_path, overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.message().c_str());
    return to_int(ExitCode::usage);
  }
  spec::JobSpec job = *loaded.spec;
  // hosts: kubernetes (or transport: kubectl): the hosts are pods, reached through the API server
  // (hosts_kubernetes.h).
  if (job.kubernetes.enabled) return check_kubernetes_hosts(job, options.spec_path, options.json);
  // transport: srun starts this very binary on the nodes (or ssh.remote_dtrain): check that one.
  if (job.transport == spec::TransportKind::srun && job.ssh.remote_dtrain.empty()) {
    job.ssh.remote_dtrain = this_executable();
  }
  SystemClock clock;
  std::string script = facts_script(job);
  bool openssh = job.ssh.client == spec::SshClient::openssh;
  transport::SshTransport ssh(ssh_options(job, script));
  transport::OpensshTransport openssh_transport(ssh_options(job, script));

  std::vector<HostReport> reports;
  for (const auto* list : {&job.hosts, &job.spares}) {
    for (const spec::HostEntry& entry : *list) {
      HostReport report;
      report.entry = entry;
      report.local = entry.is_local();
      report.via = job.transport == spec::TransportKind::srun ? "srun"
                   : report.local                                ? "local"
                                                                 : to_string(job.ssh.client);
      reports.push_back(std::move(report));
    }
  }
  if (job.transport == spec::TransportKind::srun) check_over_srun(reports, script, clock);
  for (HostReport& report : reports) {
    if (report.via == "srun") continue;
    if (report.local) {
      check_locally(report, script, clock);
      continue;
    }
    transport::AgentTarget target;
    target.host = report.entry.name;
    target.user = report.entry.user;
    target.port = report.entry.port;
    if (openssh) {
      auto connection = openssh_transport.connect(target);
      if (!connection) {
        report.problems.push_back(connection.error().message);
        continue;
      }
      report.openssh = std::move(*connection);
      continue;
    }
    auto connection = ssh.connect(target);
    if (!connection) {
      report.problems.push_back(connection.error().message);
      continue;
    }
    report.connection = std::move(*connection);
  }
  check_over_ssh(reports, clock);
  std::string this_os = local_os();
  for (HostReport& report : reports) {
    if (report.problems.empty()) evaluate(report, job, this_os);
  }
  std::optional<events::StackConsistency> stacks = check_stacks(job, reports);
  check_health(job, reports);
  bool all_ok = std::all_of(reports.begin(), reports.end(), [](const HostReport& report) { return report.ok; });

  if (options.json) {
    nlohmann::json document = {{"ok", all_ok}, {"spec", options.spec_path}, {"hosts", nlohmann::json::array()}};
    for (const HostReport& report : reports) document["hosts"].push_back(to_json(report));
    if (stacks) document["stack"] = stacks->to_json();
    std::printf("%s\n", document.dump(2).c_str());
  } else {
    print_table(reports);
    print_health_checks(job, reports);
    print_stack_differences(stacks);
    if (!all_ok) {
      std::fprintf(stderr, "\nhosts that cannot run the job:\n");
      for (const HostReport& report : reports) {
        for (const std::string& problem : report.problems) {
          std::fprintf(stderr, "  %s (via %s)\n", problem.c_str(), report.via.c_str());
        }
      }
    }
  }
  return all_ok ? to_int(ExitCode::ok) : to_int(ExitCode::infra);
}

}  // namespace

void add_hosts_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<HostsOptions>();
  CLI::App* command = app.add_subcommand(
      "hosts", "check every host of a job spec: ssh, host key, dtrain, GPUs, disk, clock, software stack, health "
               "checks (exit 3 if any fails); hosts: kubernetes: the kubeconfig user's permissions (kubectl auth "
               "can-i), the JobSet CRD and the selector's pods; "
               "--reliability: each host's failures and exclusions from the run registry; quarantine, release, "
               "--quarantined: the hosts kept out of every plan");
  command->add_option("spec", options->spec_path, "job spec (YAML); not with --reliability");
  command->add_option("--set", options->overrides, "override a spec key: --set ssh.connect_timeout=5s");
  command->add_flag("--json", options->json, "print JSON instead of a table");
  command->add_flag("--reliability", options->reliability,
                    "no spec: per host from the run registry, hours held, failures (root causes / all) and per 1,000 "
                    "hours, times lost and excluded, the last exclusion and why");
  command->add_option("--since", options->since, "with --reliability: from this UTC date on (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--until", options->until, "with --reliability: before this UTC date (YYYY-MM-DD or YYYY-MM)");
  auto quarantine = add_hosts_quarantine_commands(*command, context);  // quarantine, release, --quarantined
  command->callback([options, quarantine, &context] {
    if (std::optional<int> handled = quarantine(options->json)) {
      context.exit_code = *handled;
      return;
    }
    context.exit_code = run_hosts(*options);
  });
}

}  // namespace dtrain::cli
