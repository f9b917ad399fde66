// dtrain run's flag table and its parse (run_arguments.h).
//
// The arguments are parsed here, not by CLI11: everything after the script belongs to the
// script (torchrun's argparse REMAINDER), and a script argument that happens to be a dtrain
// subcommand name ("plan", "status") or a flag of ours must reach the script untouched.

#include "cli/run_arguments.h"

#include <cctype>
#include <cstdlib>
#include <string_view>

#include "launcher/base/strings.h"

namespace dtrain::cli {

namespace {

enum class FlagAction {
  procs, hosts, hostfile, max_restarts, set, name, output, detach, over_quota, nnodes, standalone, module, no_python,
  run_path, node_rank, shutdown_timeout, role, help, ignored, ignored_output, refused
};

/// What a value must look like before it is taken (torchrun's argparse types and choices).
enum class ValueCheck { any, whole_number, seconds, start_method };

/// One option the parser knows: its spellings, whether it takes a value, and what it does.
struct Flag {
  std::vector<std::string> spellings;
  bool takes_value;
  FlagAction action;
  /// One of torchrun's options: when the command line does not give it, its PET_ variable
  /// (pet_variable) is read, as torchrun's argparse actions do.
  bool torchrun;
  /// FlagAction::ignored: why it changes nothing here (the warning line says it).
  const char* ignored_because = nullptr;
  ValueCheck check = ValueCheck::any;
};

constexpr const char* kRendezvous =
    "dtrain does its own rendezvous, nothing to set up (TORCHELASTIC_RUN_ID is the run's id)";
constexpr const char* kMonitorInterval =
    "dtrain sees a worker's exit at once and a hang through heartbeats (--set heartbeat.interval=..., "
    "heartbeat.hang_timeout=...)";
constexpr const char* kStartMethod =
    "dtrain's agent starts every worker as a new process running the command, never through Python "
    "multiprocessing";
constexpr const char* kEventLogHandler = "dtrain records every event in the run directory's events.jsonl";
constexpr const char* kLocalAddress = "dtrain reaches each host by its name in --hosts or --hostfile";
constexpr const char* kLogsSpecs =
    "a torchrun logging plug-in; dtrain keeps every rank's output in the run directory (dtrain logs RUN)";
constexpr const char* kDuplicateFilters =
    "every rank's output is kept in the run directory; filter it there (dtrain logs RUN | grep ...)";
constexpr const char* kNumaBinding = "dtrain does not bind workers to CPUs";
constexpr const char* kSignals =
    "dtrain stops the workers on SIGINT, SIGTERM and SIGHUP (stop_grace, then SIGKILL) and asks them for a "
    "checkpoint on SIGUSR1; it forwards no other signal";
constexpr const char* kVirtualLocalRank =
    "every worker keeps its own LOCAL_RANK and sees its host's GPUs in CUDA_VISIBLE_DEVICES, so its GPU is "
    "cuda:LOCAL_RANK (not cuda:0)";

/// Every option: dtrain's own first, then torchrun's in the order of its --help. A torchrun
/// option added here is read from its PET_ variable too, with nothing else to write.
const std::vector<Flag>& flags() {
  using A = FlagAction;
  static const std::vector<Flag> table = {
      {{"--hosts"}, true, A::hosts, false},
      {{"--hostfile"}, true, A::hostfile, false},
      {{"--set"}, true, A::set, false},
      {{"--name"}, true, A::name, false},
      {{"--output"}, true, A::output, false},
      {{"-d", "--detach"}, false, A::detach, false},
      {{"--over-quota"}, false, A::over_quota, false},
      {{"-h", "--help"}, false, A::help, false},
      {{"--nnodes"}, true, A::nnodes, true},
      {{"-n", "--nproc-per-node", "--nproc_per_node"}, true, A::procs, true},
      {{"--rdzv-backend", "--rdzv_backend"}, true, A::ignored, true, kRendezvous},
      {{"--rdzv-endpoint", "--rdzv_endpoint"}, true, A::ignored, true, kRendezvous},
      {{"--rdzv-id", "--rdzv_id"}, true, A::ignored, true, kRendezvous},
      {{"--rdzv-conf", "--rdzv_conf"}, true, A::ignored, true, kRendezvous},
      {{"--standalone"}, false, A::standalone, true},
      {{"--max-restarts", "--max_restarts"}, true, A::max_restarts, true},
      {{"--monitor-interval", "--monitor_interval"}, true, A::ignored, true, kMonitorInterval, ValueCheck::seconds},
      {{"--start-method", "--start_method"}, true, A::ignored, true, kStartMethod, ValueCheck::start_method},
      {{"--event-log-handler", "--event_log_handler"}, true, A::ignored, true, kEventLogHandler},
      {{"--role"}, true, A::role, true},
      {{"-m", "--module"}, false, A::module, true},
      {{"--no-python", "--no_python"}, false, A::no_python, true},
      {{"--run-path", "--run_path"}, false, A::run_path, true},
      {{"--log-dir", "--log_dir"}, true, A::ignored_output, true},
      {{"-r", "--redirects"}, true, A::ignored_output, true},
      {{"-t", "--tee"}, true, A::ignored_output, true},
      {{"--local-ranks-filter", "--local_ranks_filter"}, true, A::ignored_output, true},
      {{"--duplicate-stdout-filters", "--duplicate_stdout_filters"}, true, A::ignored, true, kDuplicateFilters},
      {{"--duplicate-stderr-filters", "--duplicate_stderr_filters"}, true, A::ignored, true, kDuplicateFilters},
      {{"--node-rank", "--node_rank"}, true, A::node_rank, true, nullptr, ValueCheck::whole_number},
      {{"--master-addr", "--master_addr"}, true, A::refused, true},
      {{"--master-port", "--master_port"}, true, A::refused, true},
      {{"--local-addr", "--local_addr"}, true, A::ignored, true, kLocalAddress},
      {{"--logs-specs", "--logs_specs"}, true, A::ignored, true, kLogsSpecs},
      {{"--numa-binding", "--numa_binding"}, true, A::ignored, true, kNumaBinding},
      {{"--signals-to-handle", "--signals_to_handle"}, true, A::ignored, true, kSignals},
      {{"--shutdown-timeout", "--shutdown_timeout"}, true, A::shutdown_timeout, true, nullptr,
       ValueCheck::whole_number},
      {{"--virtual-local-rank", "--virtual_local_rank"}, false, A::ignored, true, kVirtualLocalRank},
  };
  return table;
}

/// The first long spelling: --nproc-per-node for -n, --module for -m.
const std::string& long_name(const Flag& flag) {
  for (const std::string& spelling : flag.spellings) {
    if (starts_with(spelling, "--")) return spelling;
  }
  return flag.spellings.front();
}

/// torchrun's variable for an option: PET_ and its first long spelling, upper case, dashes as
/// underscores (argparse's dest): --nproc-per-node → PET_NPROC_PER_NODE, -m/--module → PET_MODULE.
std::string pet_variable(const Flag& flag) {
  std::string variable = "PET_";
  for (char c : long_name(flag).substr(2)) variable += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return variable;
}

std::vector<std::string> all_spellings() {
  std::vector<std::string> spellings;
  for (const Flag& flag : flags()) spellings.insert(spellings.end(), flag.spellings.begin(), flag.spellings.end());
  return spellings;
}

/// The flag `name` spells: exactly, or, for a long option, as the start of exactly one spelling
/// (torchrun's argparse takes such abbreviations: `--redirect=3`; `--nproc` could be either
/// spelling of --nproc-per-node and is refused there as here).
const Flag* find_flag(std::string_view name) {
  const Flag* prefixed = nullptr;
  int prefix_matches = 0;
  for (const Flag& flag : flags()) {
    for (const std::string& spelling : flag.spellings) {
      if (spelling == name) return &flag;
      if (starts_with(name, "--") && name.size() > 2 && starts_with(spelling, name)) {
        prefixed = &flag;
        ++prefix_matches;
      }
    }
  }
  return prefix_matches == 1 ? prefixed : nullptr;
}

std::string quote(std::string_view text) { return "'" + printable(text, 64) + "'"; }

bool is_whole_number(const std::string& text) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

/// torchrun's check_env reads a switch's variable with int(): 0 is off, any other number on.
std::optional<bool> switch_value(const std::string& text) {
  std::string_view number = trim(text);
  if (!number.empty() && (number[0] == '+' || number[0] == '-')) number.remove_prefix(1);
  if (number.empty() || number.size() > 18) return std::nullopt;
  bool on = false;
  for (char c : number) {
    if (c < '0' || c > '9') return std::nullopt;
    on = on || c != '0';
  }
  return on;
}

/// The value's problem for `flag` (a message to follow its name), or nullopt when it is fine.
std::optional<std::string> value_problem(const Flag& flag, const std::string& value) {
  switch (flag.check) {
    case ValueCheck::any: return std::nullopt;
    case ValueCheck::whole_number:
      if (is_whole_number(value)) return std::nullopt;
      return flag.action == FlagAction::shutdown_timeout ? "write a whole number of seconds, e.g. 30"
                                                         : "write a whole number, e.g. 0";
    case ValueCheck::seconds: {
      char* end = nullptr;
      double seconds = std::strtod(value.c_str(), &end);
      if (!value.empty() && end == value.c_str() + value.size() && seconds >= 0) return std::nullopt;
      return "write a number of seconds, e.g. 0.1";
    }
    case ValueCheck::start_method:
      if (value == "spawn" || value == "fork" || value == "forkserver") return std::nullopt;
      return "torchrun takes spawn, fork or forkserver";
  }
  return std::nullopt;
}

/// Applies one option, `spelled` as typed (or the variable, when `given.variable` is set).
/// A switch arrives only when on. An error is the message to print.
std::optional<std::string> apply(const Flag& flag, const std::string& spelled, const GivenValue& given,
                                 RunRequest& request) {
  if (flag.takes_value) {
    if (std::optional<std::string> problem = value_problem(flag, given.value)) {
      return given.quoted(spelled) + ": " + *problem;
    }
  }
  const std::string switched_on = given.variable.empty() ? spelled : given.variable + "=" + given.value;
  switch (flag.action) {
    case FlagAction::procs: request.procs_per_host = given; break;
    case FlagAction::hosts: request.hosts = given.value; break;
    case FlagAction::hostfile: request.hostfile = given.value; break;
    case FlagAction::max_restarts: request.max_restarts = given; break;
    case FlagAction::set: request.sets.push_back(given.value); break;
    case FlagAction::name: request.name = given.value; break;
    case FlagAction::output:
      request.output = given.value;
      request.output_given = true;
      break;
    case FlagAction::detach: request.detach = true; break;
    case FlagAction::over_quota: request.over_quota = true; break;
    case FlagAction::nnodes: request.nnodes = given; break;
    case FlagAction::standalone: break;  // this machine alone is the default already
    case FlagAction::module: request.module = switched_on; break;
    case FlagAction::no_python: request.no_python = switched_on; break;
    case FlagAction::run_path: request.run_path = switched_on; break;
    case FlagAction::node_rank: request.node_rank = given; break;
    case FlagAction::shutdown_timeout: request.shutdown_timeout = given; break;
    case FlagAction::role: request.role = given; break;
    case FlagAction::help: request.help = true; break;
    case FlagAction::ignored: request.ignored.push_back({given.origin(spelled), flag.ignored_because}); break;
    case FlagAction::ignored_output: {
      std::string option = flag.spellings.front();
      for (const std::string& spelling : flag.spellings) {
        if (starts_with(spelling, "--") && spelling.find('_') == std::string::npos) option = spelling;
      }
      request.torchrun_output.push_back({given.origin(spelled), option, given.value});
      break;
    }
    case FlagAction::refused:
      return given.origin(spelled) +
             ": dtrain starts the workers on every host itself from this one command and sets MASTER_ADDR and "
             "MASTER_PORT for each generation; run it once, on one machine, list the hosts with --hosts or "
             "--hostfile, and " + (given.variable.empty() ? "drop " : "unset ") + given.origin(spelled);
  }
  return std::nullopt;
}

std::optional<std::string> unknown_option(const std::string& name) {
  // A typo, or the start of more than one spelling (see find_flag).
  std::vector<std::string> candidates = all_spellings();
  std::string hint = closest_match(name, candidates);
  for (const std::string& candidate : candidates) {
    if (hint.empty() && name.size() >= 4 && starts_with(candidate, name)) hint = candidate;
  }
  return "unknown option " + quote(name) +
         (hint.empty() ? "; see dtrain run --help (a flag meant for the script goes after the script)"
                       : "; did you mean '" + hint + "'?");
}

/// The command line's options; `given` collects the flags it gave (their PET_ variables are
/// then not read).
std::optional<std::string> parse_command_line(const std::vector<std::string>& args, RunRequest& request,
                                              std::vector<const Flag*>& given) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      request.after_separator = true;
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the script: the rest is its own
    std::string name = arg;
    std::optional<std::string> value;
    if (starts_with(arg, "--")) {
      if (size_t equals = arg.find('='); equals != std::string::npos) {
        name = arg.substr(0, equals);
        value = arg.substr(equals + 1);
      }
    } else if (const Flag* short_flag = find_flag(arg.substr(0, 2));
               arg.size() > 2 && short_flag && short_flag->takes_value) {
      name = arg.substr(0, 2);  // -n4, -r3
      value = arg.substr(2);
    }
    const Flag* flag = find_flag(name);
    if (flag == nullptr) return unknown_option(name);
    if (!flag->takes_value && value) return name + " takes no value (got " + quote(*value) + ")";
    if (flag->takes_value && !value) {
      if (i + 1 >= args.size()) return name + " needs a value";
      value = args[++i];
    }
    given.push_back(flag);
    if (auto error = apply(*flag, name, GivenValue{value.value_or(""), ""}, request)) return error;
  }
  request.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return std::nullopt;
}

/// torchrun's options the command line left out, from their PET_ variables.
std::optional<std::string> read_variables(const spec::EnvLookup& env, const std::vector<const Flag*>& given,
                                          RunRequest& request) {
  for (const Flag& flag : flags()) {
    if (!flag.torchrun) continue;
    bool on_command_line = false;
    for (const Flag* seen : given) on_command_line = on_command_line || seen == &flag;
    if (on_command_line) continue;
    std::string variable = pet_variable(flag);
    std::optional<std::string> value = env(variable);
    if (!value || value->empty()) continue;
    GivenValue from_env{*value, variable};
    if (!flag.takes_value) {
      std::optional<bool> on = switch_value(*value);
      if (!on) {
        return variable + "=" + quote(*value) + ": write 1 to turn " + long_name(flag) +
               " on or 0 for off (torchrun reads it as a number)";
      }
      if (!*on) continue;
    }
    if (auto error = apply(flag, variable, from_env, request)) return error;
  }
  return std::nullopt;
}

}  // namespace

std::string GivenValue::quoted(const std::string& label) const {
  return variable.empty() ? label + " " + quote(value) : variable + "=" + quote(value);
}

std::string GivenValue::origin(const std::string& label) const { return variable.empty() ? label : variable; }

std::optional<std::string> parse_run_arguments(const std::vector<std::string>& args, const spec::EnvLookup& env,
                                               RunRequest& request) {
  std::vector<const Flag*> given;
  if (auto error = parse_command_line(args, request, given)) return error;
  if (request.help) return std::nullopt;
  if (auto error = read_variables(env, given, request)) return error;
  if (request.run_path) {  // torchrun: --run-path runs the script with python, over -m and --no-python
    request.module.reset();
    request.no_python.reset();
  }
  return std::nullopt;
}

}  // namespace dtrain::cli
