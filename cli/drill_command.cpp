// `dtrain drill`: inject a real fault and grade the recovery (man/dtrain-drill.1).
//   dtrain drill RUN --fault KIND[:TARGET] [--at-step N] [--slo FILE | --detect 10s --recover 60s
//                --max-lost-steps 100] [--timeout 10m] [--json]
//                [--cut-command CMD --heal-command CMD | --allow-firewall] [--partition-duration 90s]
//   dtrain drill --spec drill.yaml [--json]
//   dtrain drill --history [--json]
// Exit: 0 every objective met, 1 one missed, 2 usage, 3 the drill could not run.

#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/drill/drill_history.h"
#include "launcher/report/report_files.h"
#include "launcher/run/governance.h"
#include "launcher/drill/spec_drill.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/drill_spec.h"

namespace dtrain::cli {
namespace {

struct DrillOptions {
  std::string run;
  std::string fault;
  std::optional<int64_t> at_step;
  std::string slo;
  std::string detect, recover;
  std::optional<int64_t> max_lost_steps;
  std::optional<std::string> timeout;
  std::string spec;
  bool history = false;
  bool json = false;
  std::string cut_command, heal_command;
  bool allow_firewall = false;
  std::string partition_duration;
};

int usage(const std::string& message) {
  std::fprintf(stderr, "dtrain drill: %s\n", message.c_str());
  return to_int(ExitCode::usage);
}

int cannot_run(const std::string& message) {
  std::fprintf(stderr, "dtrain drill: %s\n", message.c_str());
  return to_int(ExitCode::infra);
}

std::string this_executable() {
  char path[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return length > 0 ? std::string(path, static_cast<size_t>(length)) : std::string();
}

void on_signal(int) { drill::request_cancel(); }

void install_cancel_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

drill::Say progress() {
  return [](const std::string& line) { std::fprintf(stderr, "drill: %s\n", line.c_str()); };
}

/// --cut-command/--heal-command/--allow-firewall/--partition-duration onto a live fault.
std::optional<int> read_partition_flags(const DrillOptions& options, drill::Fault& fault) {
  fault.cut_command = options.cut_command;
  fault.heal_command = options.heal_command;
  if (options.allow_firewall) fault.partition = drill::PartitionMethod::firewall;
  else if (!options.cut_command.empty() || !options.heal_command.empty()) fault.partition = drill::PartitionMethod::commands;
  if (!options.partition_duration.empty()) {
    Result<Millis> parsed = parse_duration(options.partition_duration);
    if (!parsed) return usage("--partition-duration '" + options.partition_duration + "': " + parsed.error().message);
    fault.partition_duration = *parsed;
  }
  if (Status ok = drill::check_partition_settings(fault, "--fault " + fault.label()); !ok) return usage(ok.error().message);
  return std::nullopt;
}

/// --slo, then the flags on top of it (a flag wins over the file).
std::optional<int> read_objectives(const DrillOptions& options, drill::Objectives& objectives) {
  if (!options.slo.empty()) {
    Result<spec::DrillObjectives> loaded = spec::load_drill_objectives(options.slo);
    if (!loaded) return usage("--slo: " + loaded.error().message);
    objectives.detect = loaded->detect;
    objectives.recover = loaded->recover;
    objectives.max_lost_steps = loaded->max_lost_steps;
  }
  for (auto [flag, text, target] : {std::tuple{"--detect", &options.detect, &objectives.detect},
                                    std::tuple{"--recover", &options.recover, &objectives.recover}}) {
    if (text->empty()) continue;
    Result<Millis> parsed = parse_duration(*text);
    if (!parsed) return usage(std::string(flag) + " '" + *text + "': " + parsed.error().message);
    *target = *parsed;
  }
  if (options.max_lost_steps) {
    if (*options.max_lost_steps < 0) return usage("--max-lost-steps must be 0 or more");
    objectives.max_lost_steps = *options.max_lost_steps;
  }
  return std::nullopt;
}

/// The run's HTML report (`dtrain report`), written where the verdict says it is, so that each
/// verdict links to a picture of what the drill did to the run.
void write_run_report(const drill::DrillReport& report) {
  std::string path = drill::report_path(report);
  if (path.empty()) return;
  std::string run_dir = path.substr(0, path.rfind('/'));
  Result<report::ReportFiles> written = report::write_report(run_dir, path);
  if (!written) std::fprintf(stderr, "dtrain drill: warning: no report for run %s: %s\n", report.run_id.c_str(), written.error().message.c_str());
}

/// One audit row per drill that ran: which fault was injected into which run, and the verdict.
void audit_drill(const drill::DrillReport& report, const std::string& target, nlohmann::json arguments) {
  std::string result = report.verdict();
  if (report.error) result += ": " + *report.error;
  run::audit_action("dtrain drill", "drill", report.run_id, target, std::move(arguments), result);
}

int print_report(const drill::DrillReport& report, bool json) {
  write_run_report(report);
  if (json) {
    std::printf("%s\n", drill::to_json(report).dump(2).c_str());
  } else {
    std::fputs(drill::format_report(report).c_str(), stdout);
  }
  return to_int(report.exit_code());
}

int show_history(bool json) {
  std::string path = drill::drill_history_path();
  Result<std::vector<nlohmann::json>> entries = drill::read_drill_history(path);
  if (!entries) return cannot_run(entries.error().message);
  if (json) {
    std::printf("%s\n", nlohmann::json(*entries).dump(2).c_str());
  } else {
    std::fputs(drill::format_history(*entries).c_str(), stdout);
  }
  return 0;
}

int live_drill(const DrillOptions& options, Millis timeout) {
  Result<drill::Fault> fault = drill::parse_fault(options.fault);
  if (!fault) return usage(fault.error().message);
  if (std::optional<int> bad = read_partition_flags(options, *fault)) return *bad;
  if (options.at_step) {
    if (*options.at_step < 0) return usage("--at-step must be 0 or more");
    fault->at_step = *options.at_step;
  }
  drill::LiveDrillPlan plan;
  plan.run = options.run;
  plan.fault = *fault;
  plan.timeout = timeout;
  if (std::optional<int> bad = read_objectives(options, plan.objectives)) return *bad;
  install_cancel_handlers();
  Result<drill::DrillReport> report = drill::run_live_drill(plan, progress());
  nlohmann::json arguments = {{"fault", options.fault}, {"mode", "live"}};
  if (options.at_step) arguments["at_step"] = *options.at_step;
  if (!report) {
    run::audit_action("dtrain drill", "drill", options.run, options.fault, arguments,
                      "error: " + report.error().message);
    return report.error().kind == ErrorKind::user ? usage(report.error().message) : cannot_run(report.error().message);
  }
  audit_drill(*report, options.fault, std::move(arguments));
  return print_report(*report, options.json);
}

// An inline `job:` becomes a file the child `dtrain submit` can read.
Result<std::string> write_inline_job(const std::string& drill_id, const std::string& yaml) {
  std::string dir = dtrain_home() + "/drills";
  if (Status made = make_directories(dir); !made) return made.error();
  std::string path = dir + "/" + drill_id + ".job.yaml";
  if (Status written = write_file_atomic(path, yaml); !written) return written.error();
  return path;
}

int spec_drill(const DrillOptions& options, std::optional<Millis> timeout_flag) {
  spec::DrillSpecResult loaded = spec::load_drill_spec(options.spec);
  if (!loaded.ok()) return usage(loaded.message());
  const spec::DrillSpec& drill_spec = *loaded.spec;
  drill::SpecDrillPlan plan;
  plan.drill_id = drill::make_drill_id();
  plan.dtrain_exe = this_executable();
  if (plan.dtrain_exe.empty()) return cannot_run("cannot find this dtrain binary through /proc/self/exe");
  plan.spec_path = options.spec;
  plan.timeout = timeout_flag.value_or(drill_spec.timeout);
  for (const spec::Override& set : drill_spec.sets) plan.sets.push_back(set.key + "=" + set.value);
  for (const spec::DrillFaultEntry& entry : drill_spec.faults) {
    Result<drill::Fault> fault = drill::parse_fault(entry.target.empty() ? entry.fault : entry.fault + ":" + entry.target);
    if (!fault) return usage(entry.where + ": " + fault.error().message);
    fault->at_step = entry.at_step;
    if (entry.delay) fault->delay = *entry.delay;
    if (entry.partition) {
      fault->partition = entry.partition->method == "firewall" ? drill::PartitionMethod::firewall
                                                               : drill::PartitionMethod::commands;
      fault->cut_command = entry.partition->cut;
      fault->heal_command = entry.partition->heal;
      fault->partition_duration = entry.partition->duration;
    }
    if (Status ok = drill::check_partition_settings(*fault, entry.where); !ok) return usage(ok.error().message);
    plan.faults.push_back(*fault);
  }
  plan.objectives.detect = drill_spec.objectives.detect;
  plan.objectives.recover = drill_spec.objectives.recover;
  plan.objectives.max_lost_steps = drill_spec.objectives.max_lost_steps;
  if (std::optional<int> bad = read_objectives(options, plan.objectives)) return *bad;
  if (!drill_spec.job_path.empty()) {
    plan.job_path = drill_spec.job_path;
  } else {
    Result<std::string> written = write_inline_job(plan.drill_id, drill_spec.inline_job_yaml);
    if (!written) return cannot_run("cannot write the inline job: " + written.error().message);
    plan.job_path = *written;
  }
  install_cancel_handlers();
  drill::DrillReport report = drill::run_spec_drill(plan, progress());
  audit_drill(report, options.spec, {{"mode", "spec"}});
  return print_report(report, options.json);
}

int run_drill(const DrillOptions& options) {
  bool live = !options.run.empty() || !options.fault.empty();
  int modes = (options.history ? 1 : 0) + (options.spec.empty() ? 0 : 1) + (live ? 1 : 0);
  if (modes != 1) {
    return usage(modes == 0 ? "say what to drill: `dtrain drill RUN --fault kill-rank:1`, `dtrain drill --spec "
                              "drill.yaml`, or `dtrain drill --history`"
                            : "use one of RUN --fault ..., --spec FILE and --history, not several");
  }
  if (options.history) return show_history(options.json);
  std::optional<Millis> timeout;
  if (options.timeout) {
    Result<Millis> parsed = parse_duration(*options.timeout);
    if (!parsed) return usage("--timeout '" + *options.timeout + "': " + parsed.error().message);
    timeout = *parsed;
  }
  if (!options.spec.empty()) {
    if (options.at_step) return usage("--at-step belongs in the drill spec with --spec (faults: [{..., at_step: N}])");
    if (!options.cut_command.empty() || !options.heal_command.empty() || options.allow_firewall ||
        !options.partition_duration.empty()) {
      return usage("with --spec, say how to partition in the drill spec: faults: [{fault: partition-host, target: H, "
                   "partition: {cut: ..., heal: ...}}] or partition: {method: firewall}");
    }
    return spec_drill(options, timeout);
  }
  if (options.run.empty()) return usage("--fault " + options.fault + ": name the run to drill: dtrain drill RUN --fault ...");
  if (options.fault.empty()) {
    return usage("name the fault to inject into " + options.run + ": --fault kill-rank:1 (kinds: " +
                 join(drill::fault_kind_names(), ", ") + ")");
  }
  return live_drill(options, timeout.value_or(Millis(600'000)));
}

}  // namespace

void add_drill_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<DrillOptions>();
  CLI::App* command = app.add_subcommand("drill", "Inject a real fault into a run and grade the recovery (see dtrain-drill(1))");
  command->add_option("run", options->run, "Run id or a unique prefix of one (a live drill)");
  command->add_option("--fault", options->fault,
                      "KIND[:TARGET]: kill-rank:R, hang-rank:R, corrupt-checkpoint[:R], kill-host:H, partition-host:H, "
                      "kill-supervisor (slow-storage with --spec)");
  command->add_option("--at-step", options->at_step, "Inject once every rank has reached this step");
  command->add_option("--slo", options->slo, "YAML file with the objectives: detect, recover, max_lost_steps");
  command->add_option("--detect", options->detect, "Objective: injected → failure detected within this (e.g. 10s)");
  command->add_option("--recover", options->recover, "Objective: injected → training again within this (e.g. 60s)");
  command->add_option("--max-lost-steps", options->max_lost_steps, "Objective: at most this many steps redone");
  command->add_option("--timeout", options->timeout, "Give up on the drill after this long (default 10m, or the drill spec's timeout)");
  command->add_option("--cut-command", options->cut_command,
                      "partition-host: shell command that cuts the host off ({host} = its name), run here");
  command->add_option("--heal-command", options->heal_command, "partition-host: shell command that reconnects it");
  command->add_flag("--allow-firewall", options->allow_firewall,
                    "partition-host: opt in to nft/iptables rules on the host itself (self-removing; see dtrain-drill(1))");
  command->add_option("--partition-duration", options->partition_duration,
                      "partition-host: the longest the host stays cut off (default from heartbeat.timeout, see dtrain-drill(1))");
  command->add_option("--spec", options->spec, "Self-contained drill: start the job in this drill spec, drill it, grade it");
  command->add_flag("--history", options->history, "Print the drill history ($DTRAIN_HOME/drills.jsonl)");
  command->add_flag("--json", options->json, "Print the verdict (or the history) as JSON");
  command->callback([options, &context] { context.exit_code = run_drill(*options); });
}

}  // namespace dtrain::cli
