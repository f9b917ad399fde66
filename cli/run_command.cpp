// dtrain run [options] SCRIPT [ARGS]... | [options] -- COMMAND [ARGS]...
//
// torchrun's command line with dtrain's supervision. The flags (parsed by run_arguments.cpp,
// which also reads torchrun's PET_* variables) become a job spec as YAML text, loaded by the
// same loader as `dtrain submit SPEC` (so validation and its messages are the same, and the run
// directory keeps it as spec.yaml like any other); from there run::submit does the rest, exactly
// as for submit. Every torchrun option is accepted, mapped where it maps, so a torchrun line can
// be pasted after `dtrain run`.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/run_arguments.h"
#include "launcher/agent/host_facts.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/run/run_driver.h"
#include "launcher/spec/slurm_allocation.h"

namespace dtrain::cli {

namespace {

constexpr const char* kUsage = R"(Usage: dtrain run [options] SCRIPT [ARGS]...
       dtrain run [options] -- COMMAND [ARGS]...

Starts a job from one command line, the way torchrun does, and supervises it exactly like
`dtrain submit` (same run directory, status, logs, restarts; see dtrain-run(1)).

The command:
  SCRIPT [ARGS]...           run as `python3 -u SCRIPT ARGS` on every worker, like torchrun
                             (PYTHON_EXEC, if set, replaces python3); every word after SCRIPT
                             goes to the script, flags included
  -- COMMAND [ARGS]...       run as written (`-- python3 train.py`, `-- ./a.out`); a COMMAND
                             ending in .py is run with python3 -u as above
  -m, --module               SCRIPT is a module: python3 -u -m SCRIPT ARGS
  --no-python                run SCRIPT itself, without python3
  --run-path                 run SCRIPT with python3 -u (torchrun's runpy.run_path); wins over
                             -m and --no-python, as in torchrun

Options:
  -n, --nproc-per-node N     workers per host (default 1; in a Slurm allocation, its tasks per
                             node); a hostfile's slots= wins for its host. gpu, cpu, auto: this
                             machine's GPUs (nvidia-smi), CPUs, or GPUs else CPUs (this machine
                             alone only)
  --hosts H,...              hosts to run on: names, user@host:port, hostlists (gpu[01-04]);
                             default: this machine only, or inside a Slurm allocation (salloc,
                             sbatch) its nodes, started as one srun step (hosts: slurm)
  --hostfile F               DeepSpeed/Open MPI hostfile ("worker-1 slots=4" lines)
  --max-restarts N           restarts after a failure (elastic.max_restarts; default 0)
  --set KEY=VALUE            any spec key by its dotted path (dtrain-spec(5)); repeatable
  --name NAME                the run's name (default: the script's name)
  --output all|rank0|none|auto
                             whose output to show here as it is printed, each line prefixed
                             "[rank N] " (default auto: every rank up to 8 ranks, rank 0 beyond);
                             every rank's output is kept in the run directory (dtrain logs RUN)
  -d, --detach               print the run id and supervise in the background
  --over-quota               start even though the tenant's monthly budget is spent
                             (recorded in the audit table; see dtrain-registry(1))

torchrun's other options (each also with underscores: --nproc_per_node, --max_restarts, ...):
  --nnodes N                 must equal the number of hosts given (1 without --hosts)
  --nnodes MIN:MAX           elastic: the run goes on while MIN hosts are left
                             (elastic.min_hosts = MIN); it starts on all the hosts given
  --standalone               nothing to do: this machine is the default
  --role NAME                the workers' ROLE_NAME (default: default)
  --shutdown-timeout S       seconds between SIGTERM and SIGKILL when stopping workers
                             (stop_grace; dtrain's default is 10)
  --node-rank 0              accepted on a one-host job (this machine is node 0); any other
                             rank, and --master-addr, --master-port, are refused: dtrain starts
                             every host itself and sets MASTER_ADDR/MASTER_PORT each generation
  --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf, --monitor-interval, --start-method,
  --event-log-handler, --local-addr, --logs-specs, --numa-binding, --signals-to-handle,
  --virtual-local-rank, --duplicate-stdout-filters, --duplicate-stderr-filters
                             accepted; each warns once why it changes nothing here (the
                             heartbeat settings replace --monitor-interval: --set
                             heartbeat.interval=..., heartbeat.hang_timeout=...)
  -r/--redirects, -t/--tee, --local-ranks-filter  map onto --output unless it is given:
                             --local-ranks-filter 0 is rank0 (another filter: all), --tee N
                             is all, --redirects 3 without --tee is none; --log-dir changes
                             nothing: every rank's output is kept in the run directory
  Every torchrun option is also read from its PET_ variable when not given (PET_NPROC_PER_NODE,
  PET_NO_PYTHON=1, ...), as torchrun does; the flag wins. A unique abbreviation of a long
  option (--redirect=3) is taken, as torchrun's argparse takes it.

Examples:
  dtrain run -n 4 -- python3 train.py --lr 0.1
  dtrain run -n 4 train.py --lr 0.1
  dtrain run --nproc_per_node=8 --hosts gpu[01-04] --max_restarts=3 train.py
  PET_NPROC_PER_NODE=4 PET_NO_PYTHON=1 dtrain run ./train.sh
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "dtrain run: %s\n", message.c_str());
  return to_int(ExitCode::usage);
}

/// A non-negative decimal integer, or nullopt.
std::optional<int> parse_count(const std::string& text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

bool is_python_interpreter(const std::string& program) {
  std::string base = program.substr(program.find_last_of('/') + 1);
  if (!starts_with(base, "python")) return false;
  for (char c : base.substr(6)) {
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  }
  return true;
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The worker's argv, following torchrun: `python -u [-m] SCRIPT ARGS` unless --no-python, and
/// `python -u SCRIPT ARGS` for --run-path (torchrun's runpy.run_path in a fresh interpreter).
/// After `--` the command is taken as written (it names its own program), except a .py script,
/// which nothing could run without python either. Naming the interpreter first is honoured too.
std::vector<std::string> worker_command(const RunRequest& request) {
  const char* python_exec = std::getenv("PYTHON_EXEC");  // torchrun's override of the interpreter
  std::string python = python_exec && *python_exec ? python_exec : "python3";
  const std::string& first = request.command.front();
  bool as_written = (!request.module && is_python_interpreter(first)) ||
                    (!request.run_path && (request.no_python || (!request.module && request.after_separator &&
                                                                  !ends_with(first, ".py"))));
  if (as_written) return request.command;
  std::vector<std::string> argv = {python, "-u"};
  if (request.module) argv.push_back("-m");
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  return argv;
}

/// The default name: the script's (train.py → train, -m pkg.train → train), made a valid label.
std::string name_from_command(const std::vector<std::string>& argv, bool module) {
  std::string script;
  bool python = is_python_interpreter(argv.front());
  for (size_t i = python ? 1 : 0; i < argv.size(); ++i) {
    if (!python) { script = argv[i]; break; }
    if (argv[i] == "-m" && i + 1 < argv.size()) { script = argv[i + 1]; module = true; break; }
    if (argv[i] == "-c") break;
    if (!argv[i].empty() && argv[i][0] == '-') continue;
    script = argv[i];
    break;
  }
  std::string base = script.substr(script.find_last_of('/') + 1);
  if (ends_with(base, ".py")) base.resize(base.size() - 3);
  if (module && base.find('.') != std::string::npos) base = base.substr(base.find_last_of('.') + 1);
  std::string label;
  for (char c : base) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                 c == '_' || c == '.';
    label += plain ? c : '-';
    if (label.size() == 64) break;
  }
  return label.empty() || label == "." || label == ".." ? "run" : label;
}

/// A YAML double-quoted scalar: every byte arrives unchanged (control bytes escaped).
std::string yaml_quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string yaml_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + yaml_quote(items[i]);
  return out + "]";
}

/// --hosts "a,user@b:2222,gpu[01-04]": split at the commas outside brackets (a hostlist's own
/// commas stay with it), one spec item each so that a message names the item.
std::vector<std::string> split_hosts(const std::string& text) {
  std::vector<std::string> hosts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      hosts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  hosts.push_back(current);
  return hosts;
}

// Labels of the options in messages (a value from a PET_ variable is named by the variable).
constexpr const char* kProcsLabel = "-n/--nproc-per-node";
constexpr const char* kNnodesLabel = "--nnodes";
constexpr const char* kMaxRestartsLabel = "--max-restarts";

/// The option that wrote a spec key, so that a loader message points at the command line (or
/// at the PET_ variable the value came from).
std::string flag_for_key(const RunRequest& request, const std::string& key) {
  auto under = [&](std::string_view prefix) {
    return key == prefix || starts_with(key, std::string(prefix) + ".") || starts_with(key, std::string(prefix) + "[");
  };
  auto origin = [](const std::optional<GivenValue>& given, const char* label) {
    return given ? given->origin(label) : std::string(label);
  };
  if (under("hosts")) return "--hosts";
  if (under("hostfile")) return "--hostfile";
  if (under("slots_per_host")) return origin(request.procs_per_host, "-n");
  if (under("name")) return "--name";
  if (under("worker.command")) return "the command";
  if (under("worker.env")) return origin(request.role, "--role");
  if (under("stop_grace")) return origin(request.shutdown_timeout, "--shutdown-timeout");
  if (under("elastic.max_restarts")) return origin(request.max_restarts, kMaxRestartsLabel);
  if (under("elastic.min_hosts")) return origin(request.nnodes, kNnodesLabel);
  return "";
}

/// The loader's diagnostics, with the ones about our generated text naming the flag instead of
/// a line of YAML the user never saw.
std::string describe(const RunRequest& request, const spec::LoadResult& loaded, const std::string& source_name) {
  std::string message;
  for (const spec::Diagnostic& diagnostic : loaded.diagnostics) {
    if (!message.empty()) message += "\n";
    if (diagnostic.file != source_name) {
      message += diagnostic.to_string();
      continue;
    }
    std::string flag = flag_for_key(request, diagnostic.key);
    message += "dtrain run: " + (flag.empty() ? "" : flag + ": ") +
               (diagnostic.key.empty() ? "" : diagnostic.key + ": ") + diagnostic.message;
  }
  return message;
}

std::string plural(size_t count, const char* word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

/// The flags' values, checked: what the spec is built from.
struct CheckedFlags {
  int procs = 1;
  run::OutputChoice output = run::OutputChoice::automatic;
  std::optional<int> max_restarts;
  std::optional<int> nodes_min, nodes_max;  ///< --nnodes N (both N) or MIN:MAX
  std::optional<int> shutdown_seconds;
  std::vector<spec::Override> overrides;

  /// --nnodes MIN:MAX with MIN < MAX: an elastic range.
  bool ranged() const { return nodes_min && *nodes_min != *nodes_max; }
};

/// torchrun's -n gpu|cpu|auto: counted on this machine with the probe its agent runs at hello
/// (nvidia-smi; auto is the GPUs, else the CPUs, as in torchrun). Only for a job on this machine
/// alone: another host's count is known only once its agent is up, after the plan is made.
Result<int> count_local_devices(const GivenValue& procs, bool this_machine_only) {
  const std::string& kind = procs.value;
  if (kind != "gpu" && kind != "cpu" && kind != "auto") {
    std::string fix = kind == "xpu" ? "dtrain counts NVIDIA GPUs (nvidia-smi) only; write the number of workers "
                                      "per host, e.g. -n 4"
                                    : "write the number of workers per host, e.g. -n 4 (or gpu, cpu, auto)";
    return Error::user(procs.quoted(kProcsLabel) + ": " + fix);
  }
  if (!this_machine_only) {
    return Error::user(procs.quoted(kProcsLabel) + ": dtrain counts devices only for a job on this machine "
                       "alone; with --hosts, --hostfile or Slurm write the number of workers per host (-n 8), "
                       "or slots= per host in a hostfile");
  }
  constexpr int kNvidiaSmiTimeoutMs = 5'000;  // as the agent's at hello
  nlohmann::json facts = agent::collect_host_facts(kNvidiaSmiTimeoutMs);
  int gpus = static_cast<int>(facts["gpus"].size());
  int cpus = facts["cpus"].is_number_integer() ? facts["cpus"].get<int>() : 0;
  if (kind == "gpu" && gpus == 0) {
    return Error::user(procs.quoted(kProcsLabel) + ": no GPU on this machine (nvidia-smi lists none); write "
                       "the number of workers, e.g. -n 4, or cpu");
  }
  bool use_gpus = kind == "gpu" || (kind == "auto" && gpus > 0);
  int count = use_gpus ? gpus : cpus;
  if (count < 1) return Error::infra(procs.quoted(kProcsLabel) + ": this machine's CPU count is unknown; write -n N");
  std::fprintf(stderr, "dtrain run: %s: %s, one per %s on this machine\n", procs.quoted(kProcsLabel).c_str(),
               plural(static_cast<size_t>(count), "worker").c_str(),
               use_gpus ? "GPU nvidia-smi lists" : kind == "auto" ? "CPU (nvidia-smi lists no GPU)" : "CPU");
  return count;
}

/// The flags that need no spec to check: a usage message (Error::user) names the first wrong one.
Result<CheckedFlags> check_flags(const RunRequest& request, bool this_machine_only) {
  if (request.command.empty()) {
    return Error::user("no command; write the script after the options (dtrain run -n 4 train.py --lr 0.1) "
                       "or a program after -- (dtrain run -n 4 -- python3 train.py)");
  }
  if (request.module && request.no_python) {
    return Error::user(*request.module + " and " + *request.no_python +
                       ": -m/--module and --no-python cannot be used together (a module needs python)");
  }
  if (request.node_rank && parse_count(request.node_rank->value) != 0) {
    return Error::user(request.node_rank->origin("--node-rank") + " " + request.node_rank->value +
                       ": dtrain starts the workers on every host itself from this one command, so this one is "
                       "node 0; run it once, on one machine, list the hosts with --hosts or --hostfile, and " +
                       (request.node_rank->variable.empty() ? "drop --node-rank" : "unset " + request.node_rank->variable));
  }
  if (!request.hosts.empty() && !request.hostfile.empty()) {
    return Error::user("--hosts and --hostfile both given; use one of them");
  }
  CheckedFlags flags;
  if (request.procs_per_host) {
    std::optional<int> procs = parse_count(request.procs_per_host->value);
    if (!procs) {
      Result<int> counted = count_local_devices(*request.procs_per_host, this_machine_only);
      if (!counted) return counted.error();
      procs = *counted;
    }
    if (*procs < 1) {
      return Error::user(request.procs_per_host->quoted(kProcsLabel) +
                         ": write the number of workers per host, e.g. -n 4");
    }
    flags.procs = *procs;
  }
  std::optional<run::OutputChoice> output = run::parse_output_choice(request.output);
  if (!output) {
    return Error::user("--output '" + printable(request.output, 64) +
                       "': write all, rank0, none or auto (every rank up to 8 ranks, rank 0 beyond)");
  }
  flags.output = *output;
  if (request.max_restarts) {
    flags.max_restarts = parse_count(request.max_restarts->value);
    if (!flags.max_restarts) {
      return Error::user(request.max_restarts->quoted(kMaxRestartsLabel) +
                         ": write a number of restarts, e.g. --max-restarts 3 (0: the first failure ends the run)");
    }
  }
  // --nnodes N or MIN:MAX (torchrun's elastic range).
  if (request.nnodes) {
    const std::string& nnodes = request.nnodes->value;
    size_t colon = nnodes.find(':');
    flags.nodes_min = parse_count(nnodes.substr(0, colon));
    flags.nodes_max = colon == std::string::npos ? flags.nodes_min : parse_count(nnodes.substr(colon + 1));
    if (!flags.nodes_min || !flags.nodes_max || *flags.nodes_min < 1 || *flags.nodes_max < *flags.nodes_min) {
      return Error::user(request.nnodes->quoted(kNnodesLabel) +
                         ": write the number of hosts (--nnodes 2) or a range MIN:MAX (--nnodes 1:4)");
    }
  }
  if (request.shutdown_timeout) flags.shutdown_seconds = parse_count(request.shutdown_timeout->value);
  for (const std::string& text : request.sets) {
    Result<spec::Override> parsed = spec::parse_override(text);
    if (!parsed) return Error::user("--set " + printable(text, 200) + ": " + parsed.error().message);
    flags.overrides.push_back(*parsed);
  }
  return flags;
}

/// The job spec the command line stands for, as YAML (submit keeps it as the run's spec.yaml).
std::string spec_yaml(const RunRequest& request, const CheckedFlags& flags, const std::string& base_dir,
                      bool from_slurm) {
  std::vector<std::string> argv = worker_command(request);
  std::string name = request.name.empty() ? name_from_command(argv, request.module.has_value()) : request.name;
  std::string yaml = "# built by dtrain run from its command line\nversion: 1\nname: " + yaml_quote(name) + "\n";
  if (from_slurm) yaml += "hosts: slurm\n";
  if (!request.hosts.empty()) yaml += "hosts: " + yaml_list(split_hosts(request.hosts)) + "\n";
  if (!request.hostfile.empty()) {
    std::string path = request.hostfile[0] == '/' ? request.hostfile : base_dir + "/" + request.hostfile;
    yaml += "hostfile: " + yaml_quote(path) + "\n";
  }
  if (!from_slurm || request.procs_per_host) yaml += "slots_per_host: " + std::to_string(flags.procs) + "\n";
  yaml += "worker:\n  command: " + yaml_list(argv) + "\n";
  if (request.role) yaml += "  env: {ROLE_NAME: " + yaml_quote(request.role->value) + "}\n";  // torchrun --role
  if (flags.shutdown_seconds) yaml += "stop_grace: " + std::to_string(*flags.shutdown_seconds) + "s\n";
  if (flags.max_restarts || flags.ranged()) {
    yaml += "elastic:\n";
    if (flags.max_restarts) yaml += "  max_restarts: " + std::to_string(*flags.max_restarts) + "\n";
    if (flags.ranged()) yaml += "  min_hosts: " + std::to_string(*flags.nodes_min) + "\n";
  }
  return yaml;
}

/// --nnodes and --node-rank against the hosts the spec expands to: a usage message, or nothing
/// (a range is then announced on stderr).
std::optional<std::string> check_host_count(const RunRequest& request, const CheckedFlags& flags, size_t host_count,
                                            bool from_slurm) {
  std::string host_words = plural(host_count, "host") +
                           (from_slurm ? " (Slurm job " + *spec::process_environment()("SLURM_JOB_ID") + ")"
                            : request.hosts.empty() && request.hostfile.empty()
                                ? " (this machine; list more with --hosts or --hostfile)"
                                : "");
  if (request.node_rank && host_count != 1) {
    std::string origin = request.node_rank->origin("--node-rank");
    return origin + " 0, but the job has " + host_words + "; dtrain starts every host itself from this one "
           "command (GROUP_RANK tells a worker its host), so " +
           (request.node_rank->variable.empty() ? "drop --node-rank" : "unset " + origin);
  }
  if (!request.nnodes) return std::nullopt;
  std::string nnodes = request.nnodes->variable.empty() ? "--nnodes " + request.nnodes->value
                                                        : request.nnodes->variable + "=" + request.nnodes->value;
  if (!flags.ranged() && static_cast<size_t>(*flags.nodes_min) != host_count) {
    return nnodes + ", but the job has " + host_words + "; dtrain starts every host itself, so " +
           request.nnodes->origin(kNnodesLabel) + " must equal the number of hosts, or drop it";
  }
  if (flags.ranged() && static_cast<size_t>(*flags.nodes_max) < host_count) {
    return nnodes + " allows at most " + plural(*flags.nodes_max, "host") + ", but the job has " + host_words +
           "; list fewer hosts or raise the maximum";
  }
  // MIN above the host count is the loader's elastic.min_hosts message (pointed at --nnodes).
  if (flags.ranged()) {
    std::fprintf(stderr,
                 "dtrain run: %s: starting on the job's %s; after losing hosts it goes on with "
                 "%s or more (elastic.min_hosts: %d); dtrain adds no hosts later\n",
                 nnodes.c_str(), plural(host_count, "host").c_str(), plural(*flags.nodes_min, "host").c_str(),
                 *flags.nodes_min);
  }
  return std::nullopt;
}

/// One warning line per reason: the options accepted that change nothing here, and why.
void warn_ignored(const RunRequest& request) {
  std::vector<const char*> reasons;
  for (const RunRequest::Ignored& ignored : request.ignored) {
    bool seen = false;
    for (const char* reason : reasons) seen = seen || reason == ignored.because;
    if (!seen) reasons.push_back(ignored.because);
  }
  for (const char* reason : reasons) {
    std::vector<std::string> names;
    for (const RunRequest::Ignored& ignored : request.ignored) {
      if (ignored.because == reason) names.push_back(ignored.name);
    }
    std::fprintf(stderr, "dtrain run: warning: ignored %s: %s\n", join(names, ", ").c_str(), reason);
  }
}

/// torchrun's --local-ranks-filter, --tee and --redirects as an --output choice, when --output
/// is not given: a filter of 0 shows rank 0; a tee (or another filter) every rank; both streams
/// redirected to files (3) and no tee, none. Says what it did on stderr, and that --log-dir and
/// what does not map change nothing: every rank's output is in the run directory anyway.
std::optional<run::OutputChoice> torchrun_output_choice(const RunRequest& request) {
  if (request.torchrun_output.empty()) return std::nullopt;
  auto value_of = [&](const char* option) -> std::optional<std::string> {
    std::optional<std::string> found;
    for (const RunRequest::TorchrunOutput& given : request.torchrun_output) {
      if (given.option == option) found = given.value;
    }
    return found;
  };
  std::optional<std::string> filter = value_of("--local-ranks-filter"), tee = value_of("--tee"),
                             redirects = value_of("--redirects");
  std::optional<run::OutputChoice> choice;
  std::string from;
  if (filter) {
    choice = *filter == "0" ? run::OutputChoice::rank0 : run::OutputChoice::all;
    from = "--local-ranks-filter " + *filter;
  } else if (tee && *tee != "0") {
    choice = run::OutputChoice::all;
    from = "--tee " + *tee;
  } else if (redirects && *redirects == "3") {
    choice = run::OutputChoice::none;
    from = "--redirects 3";
  }
  std::vector<std::string> names;
  for (const RunRequest::TorchrunOutput& given : request.torchrun_output) names.push_back(given.origin);
  if (request.output_given) {
    std::fprintf(stderr, "dtrain run: warning: ignored %s: --output %s decides whose output is shown here\n",
                 join(names, ", ").c_str(), request.output.c_str());
    return std::nullopt;
  }
  if (choice) {
    std::fprintf(stderr, "dtrain run: %s: shown here as --output %s (from %s; every rank's output is also kept in "
                 "the run directory: dtrain logs RUN)\n",
                 from.c_str(), run::to_string(*choice), join(names, ", ").c_str());
  } else {
    std::fprintf(stderr, "dtrain run: warning: ignored %s: every rank's output is kept in the run directory "
                 "(dtrain logs RUN); --output chooses whose is shown here\n", join(names, ", ").c_str());
  }
  return choice;
}

int run_command(const std::vector<std::string>& args) {
  RunRequest request;
  const spec::EnvLookup environment = spec::process_environment();
  if (std::optional<std::string> error = parse_run_arguments(args, environment, request)) {
    return usage_error(*error);
  }
  if (request.help) {
    std::fputs(kUsage, stdout);
    return to_int(ExitCode::ok);
  }
  // Inside a Slurm allocation (salloc, sbatch) with no host option: the allocation's nodes, and
  // Slurm's tasks per node unless -n says otherwise (spec: hosts: slurm).
  const bool from_slurm = request.hosts.empty() && request.hostfile.empty() && spec::in_slurm_allocation(environment);
  const bool this_machine_only = request.hosts.empty() && request.hostfile.empty() && !from_slurm;
  Result<CheckedFlags> flags = check_flags(request, this_machine_only);
  if (!flags) return usage_error(flags.error().message);

  char* cwd = get_current_dir_name();
  const std::string base_dir = cwd ? cwd : ".";
  std::free(cwd);
  std::string yaml = spec_yaml(request, *flags, base_dir, from_slurm);

  // Loaded here first, with the same loader and base directory submit uses, to check --nnodes
  // against the hosts it expands to and to point messages at flags; submit loads it again.
  const std::string source_name = "dtrain run";
  spec::LoadResult loaded = spec::parse_job_spec(yaml, source_name, base_dir, flags->overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", describe(request, loaded, source_name).c_str());
    return to_int(ExitCode::usage);
  }
  if (auto wrong = check_host_count(request, *flags, loaded.spec->hosts.size(), from_slurm)) {
    return usage_error(*wrong);
  }
  warn_ignored(request);

  run::SubmitOptions submit;
  submit.spec_path = source_name;
  submit.spec_text = yaml;
  submit.overrides = flags->overrides;
  submit.detach = request.detach;
  submit.over_quota = request.over_quota;
  submit.output = torchrun_output_choice(request).value_or(flags->output);
  submit.audit_action = "run";
  submit.dtrain_exe = this_executable();
  return run::submit(submit);
}

}  // namespace

int run_command_main(int argc, char** argv) {
  try {
    return run_command(std::vector<std::string>(argv, argv + argc));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "dtrain run: internal bug: %s\n", error.what());
    return to_int(ExitCode::internal);
  }
}

void add_run_command(CLI::App& app, CommandContext& context) {
  // Listed for `dtrain --help` only: main() hands `dtrain run ...` to run_command_main before
  // CLI11 parses, so that the script's own arguments are never taken for dtrain's.
  CLI::App* command = app.add_subcommand(
      "run", "Run a script on N workers per host from one torchrun-style command line (no spec file)");
  command->allow_extras();
  command->callback([&context] { context.exit_code = usage_error("internal bug: run parsed by CLI11"); });
}

}  // namespace dtrain::cli
