// dtrain run [options] SCRIPT [ARGS]... | [options] -- COMMAND [ARGS]...
//
// torchrun's command line with dtrain's supervision. The flags become a job spec as YAML text,
// loaded by the same loader as `dtrain submit SPEC` (so validation and its messages are the
// same, and the run directory keeps it as spec.yaml like any other); from there run::submit
// does the rest, exactly as for submit. torchrun's own spellings are accepted where they map,
// so a torchrun line can be pasted after `dtrain run`.
//
// The arguments are parsed here, not by CLI11: everything after the script belongs to the
// script (torchrun's argparse REMAINDER), and a script argument that happens to be a dtrain
// subcommand name ("plan", "status") or a flag of ours must reach the script untouched.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "cli/commands.h"
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
  --no-python, --no_python   run SCRIPT itself, without python3

Options:
  -n, --nproc-per-node N     workers per host (default 1; in a Slurm allocation, its tasks per
                             node); a hostfile's slots= wins for its host
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

torchrun flags, accepted so that a torchrun line can be pasted:
  --nproc_per_node N, --max_restarts N   the same as above
  --nnodes N                 must equal the number of hosts given (1 without --hosts)
  --nnodes MIN:MAX           elastic: the run goes on while MIN hosts are left
                             (elastic.min_hosts = MIN); it starts on all the hosts given
  --standalone               nothing to do: this machine is the default
  --monitor-interval S       ignored: dtrain watches workers through its heartbeat settings
                             (--set heartbeat.interval=..., heartbeat.hang_timeout=...)
  --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf  ignored (one warning): dtrain does
                             its own rendezvous
  --redirects, --tee, --log-dir  ignored (one warning): every rank's output is kept in the run
                             directory (dtrain logs RUN)
  --node-rank, --master-addr, --master-port are refused: dtrain starts every host itself and
  sets MASTER_ADDR/MASTER_PORT for each generation.

Examples:
  dtrain run -n 4 -- python3 train.py --lr 0.1
  dtrain run -n 4 train.py --lr 0.1
  dtrain run --nproc_per_node=8 --hosts gpu[01-04] --max_restarts=3 train.py
)";

/// What the command line asked for, before it becomes YAML.
struct RunRequest {
  std::string procs_per_host = "1";
  bool procs_given = false;  ///< -n given (else, in a Slurm allocation, Slurm's tasks per node)
  std::string hosts;
  std::string hostfile;
  std::optional<std::string> max_restarts;
  std::optional<std::string> nnodes;
  std::string output = "auto";
  std::vector<std::string> sets;
  std::string name;
  bool detach = false;
  bool over_quota = false;
  bool module = false;
  bool no_python = false;
  bool help = false;
  bool after_separator = false;    ///< the command came after `--`
  std::vector<std::string> command;  ///< the words after the options
  /// torchrun flags with no meaning here, for one warning line each kind.
  std::vector<std::string> ignored_rendezvous, ignored_output;
};

/// One flag the parser knows: its spellings, whether it takes a value, and what it does.
enum class FlagAction {
  procs, hosts, hostfile, max_restarts, set, name, output, detach, over_quota, nnodes, standalone, monitor_interval,
  module, no_python, help, ignored_output, refused
};

struct Flag {
  std::vector<std::string> spellings;
  bool takes_value;
  FlagAction action;
};

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {{"-n", "--nproc-per-node", "--nproc_per_node"}, true, FlagAction::procs},
      {{"--hosts"}, true, FlagAction::hosts},
      {{"--hostfile"}, true, FlagAction::hostfile},
      {{"--max-restarts", "--max_restarts"}, true, FlagAction::max_restarts},
      {{"--set"}, true, FlagAction::set},
      {{"--name"}, true, FlagAction::name},
      {{"--output"}, true, FlagAction::output},
      {{"-d", "--detach"}, false, FlagAction::detach},
      {{"--over-quota"}, false, FlagAction::over_quota},
      {{"--nnodes"}, true, FlagAction::nnodes},
      {{"--standalone"}, false, FlagAction::standalone},
      {{"--monitor-interval", "--monitor_interval"}, true, FlagAction::monitor_interval},
      {{"-m", "--module"}, false, FlagAction::module},
      {{"--no-python", "--no_python"}, false, FlagAction::no_python},
      {{"-h", "--help"}, false, FlagAction::help},
      {{"--redirects", "--tee", "--log-dir", "--log_dir"}, true, FlagAction::ignored_output},
      {{"--node-rank", "--node_rank", "--master-addr", "--master_addr", "--master-port", "--master_port"}, true,
       FlagAction::refused},
  };
  return table;
}

const Flag* find_flag(std::string_view name) {
  for (const Flag& flag : flags()) {
    for (const std::string& spelling : flag.spellings) {
      if (spelling == name) return &flag;
    }
  }
  return nullptr;
}

/// torchrun's rendezvous flags (--rdzv-backend, --rdzv_endpoint, ...): all take a value.
bool is_rendezvous_flag(std::string_view name) {
  return starts_with(name, "--rdzv-") || starts_with(name, "--rdzv_");
}

std::string single_quote(const std::string& text) { return "'" + text + "'"; }

int usage_error(const std::string& message) {
  std::fprintf(stderr, "dtrain run: %s\n", message.c_str());
  return to_int(ExitCode::usage);
}

/// Parses `args` (the words after `dtrain run`) into `request`; an error is the message to print.
std::optional<std::string> parse_arguments(const std::vector<std::string>& args, RunRequest& request) {
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
    } else if (arg.size() > 2 && find_flag(arg.substr(0, 2)) && find_flag(arg.substr(0, 2))->takes_value) {
      name = arg.substr(0, 2);  // -n4
      value = arg.substr(2);
    }
    const Flag* flag = find_flag(name);
    bool rendezvous = flag == nullptr && is_rendezvous_flag(name);
    if (flag == nullptr && !rendezvous) {
      std::vector<std::string> candidates;
      for (const Flag& known : flags()) candidates.insert(candidates.end(), known.spellings.begin(), known.spellings.end());
      for (const char* torchrun : {"--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf"}) candidates.push_back(torchrun);
      // A typo, or the start of a longer flag (torchrun's argparse accepts abbreviations).
      std::string hint = closest_match(name, candidates);
      for (const std::string& candidate : candidates) {
        if (hint.empty() && name.size() >= 4 && starts_with(candidate, name)) hint = candidate;
      }
      return "unknown option " + single_quote(printable(name, 64)) +
             (hint.empty() ? "; see dtrain run --help (a flag meant for the script goes after the script)"
                           : "; did you mean '" + hint + "'?");
    }
    bool takes_value = rendezvous || flag->takes_value;
    if (!takes_value && value) return name + " takes no value (got '" + printable(*value, 64) + "')";
    if (takes_value && !value) {
      if (i + 1 >= args.size()) return name + " needs a value";
      value = args[++i];
    }
    if (rendezvous) {
      request.ignored_rendezvous.push_back(name);
      continue;
    }
    switch (flag->action) {
      case FlagAction::procs:
        request.procs_per_host = *value;
        request.procs_given = true;
        break;
      case FlagAction::hosts: request.hosts = *value; break;
      case FlagAction::hostfile: request.hostfile = *value; break;
      case FlagAction::max_restarts: request.max_restarts = *value; break;
      case FlagAction::set: request.sets.push_back(*value); break;
      case FlagAction::name: request.name = *value; break;
      case FlagAction::output: request.output = *value; break;
      case FlagAction::detach: request.detach = true; break;
      case FlagAction::over_quota: request.over_quota = true; break;
      case FlagAction::nnodes: request.nnodes = *value; break;
      case FlagAction::standalone: break;        // localhost is the default already
      case FlagAction::monitor_interval: break;  // heartbeat.* replaces it (see --help)
      case FlagAction::module: request.module = true; break;
      case FlagAction::no_python: request.no_python = true; break;
      case FlagAction::help: request.help = true; break;
      case FlagAction::ignored_output: request.ignored_output.push_back(name); break;
      case FlagAction::refused:
        return name + ": dtrain starts the workers on every host itself from this one command and sets "
                      "MASTER_ADDR and MASTER_PORT for each generation; run it once, on one machine, list the "
                      "hosts with --hosts or --hostfile, and drop " + name;
    }
  }
  request.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return std::nullopt;
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

/// The worker's argv, following torchrun: `python -u [-m] SCRIPT ARGS` unless --no-python. After
/// `--` the command is taken as written (it names its own program), except a .py script, which
/// nothing could run without python either. Naming the interpreter first is honoured too.
std::vector<std::string> worker_command(const RunRequest& request) {
  const char* python_exec = std::getenv("PYTHON_EXEC");  // torchrun's override of the interpreter
  std::string python = python_exec && *python_exec ? python_exec : "python3";
  const std::string& first = request.command.front();
  bool as_written = request.no_python || (!request.module && is_python_interpreter(first)) ||
                    (!request.module && request.after_separator && !ends_with(first, ".py"));
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

/// The flag that wrote a spec key, so that a loader message points at the command line.
std::string flag_for_key(const std::string& key) {
  auto under = [&](std::string_view prefix) {
    return key == prefix || starts_with(key, std::string(prefix) + ".") || starts_with(key, std::string(prefix) + "[");
  };
  if (under("hosts")) return "--hosts";
  if (under("hostfile")) return "--hostfile";
  if (under("slots_per_host")) return "-n";
  if (under("name")) return "--name";
  if (under("worker.command")) return "the command";
  if (under("elastic.max_restarts")) return "--max-restarts";
  if (under("elastic.min_hosts")) return "--nnodes";
  return "";
}

/// The loader's diagnostics, with the ones about our generated text naming the flag instead of
/// a line of YAML the user never saw.
std::string describe(const spec::LoadResult& loaded, const std::string& source_name) {
  std::string message;
  for (const spec::Diagnostic& diagnostic : loaded.diagnostics) {
    if (!message.empty()) message += "\n";
    if (diagnostic.file != source_name) {
      message += diagnostic.to_string();
      continue;
    }
    std::string flag = flag_for_key(diagnostic.key);
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
  std::vector<spec::Override> overrides;

  /// --nnodes MIN:MAX with MIN < MAX: an elastic range.
  bool ranged() const { return nodes_min && *nodes_min != *nodes_max; }
};

/// The flags that need no spec to check: a usage message (Error::user) names the first wrong one.
Result<CheckedFlags> check_flags(const RunRequest& request) {
  if (request.command.empty()) {
    return Error::user("no command; write the script after the options (dtrain run -n 4 train.py --lr 0.1) "
                       "or a program after -- (dtrain run -n 4 -- python3 train.py)");
  }
  if (request.module && request.no_python) {
    return Error::user("-m/--module and --no-python cannot be used together (a module needs python)");
  }
  CheckedFlags flags;
  std::optional<int> procs = parse_count(request.procs_per_host);
  if (!procs || *procs < 1) {
    return Error::user("-n/--nproc-per-node " + single_quote(printable(request.procs_per_host, 64)) +
                       ": write the number of workers per host, e.g. -n 4");
  }
  flags.procs = *procs;
  std::optional<run::OutputChoice> output = run::parse_output_choice(request.output);
  if (!output) {
    return Error::user("--output " + single_quote(printable(request.output, 64)) +
                       ": write all, rank0, none or auto (every rank up to 8 ranks, rank 0 beyond)");
  }
  flags.output = *output;
  if (request.max_restarts) {
    flags.max_restarts = parse_count(*request.max_restarts);
    if (!flags.max_restarts) {
      return Error::user("--max-restarts " + single_quote(printable(*request.max_restarts, 64)) +
                         ": write a number of restarts, e.g. --max-restarts 3 (0: the first failure ends the run)");
    }
  }
  if (!request.hosts.empty() && !request.hostfile.empty()) {
    return Error::user("--hosts and --hostfile both given; use one of them");
  }
  // --nnodes N or MIN:MAX (torchrun's elastic range).
  if (request.nnodes) {
    size_t colon = request.nnodes->find(':');
    flags.nodes_min = parse_count(request.nnodes->substr(0, colon));
    flags.nodes_max = colon == std::string::npos ? flags.nodes_min : parse_count(request.nnodes->substr(colon + 1));
    if (!flags.nodes_min || !flags.nodes_max || *flags.nodes_min < 1 || *flags.nodes_max < *flags.nodes_min) {
      return Error::user("--nnodes " + single_quote(printable(*request.nnodes, 64)) +
                         ": write the number of hosts (--nnodes 2) or a range MIN:MAX (--nnodes 1:4)");
    }
  }
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
  std::string name = request.name.empty() ? name_from_command(argv, request.module) : request.name;
  std::string yaml = "# built by dtrain run from its command line\nversion: 1\nname: " + yaml_quote(name) + "\n";
  if (from_slurm) yaml += "hosts: slurm\n";
  if (!request.hosts.empty()) yaml += "hosts: " + yaml_list(split_hosts(request.hosts)) + "\n";
  if (!request.hostfile.empty()) {
    std::string path = request.hostfile[0] == '/' ? request.hostfile : base_dir + "/" + request.hostfile;
    yaml += "hostfile: " + yaml_quote(path) + "\n";
  }
  if (!from_slurm || request.procs_given) yaml += "slots_per_host: " + std::to_string(flags.procs) + "\n";
  yaml += "worker:\n  command: " + yaml_list(argv) + "\n";
  if (flags.max_restarts || flags.ranged()) {
    yaml += "elastic:\n";
    if (flags.max_restarts) yaml += "  max_restarts: " + std::to_string(*flags.max_restarts) + "\n";
    if (flags.ranged()) yaml += "  min_hosts: " + std::to_string(*flags.nodes_min) + "\n";
  }
  return yaml;
}

/// --nnodes against the hosts the spec expands to: a usage message, or nothing (a range is
/// then announced on stderr).
std::optional<std::string> check_host_count(const RunRequest& request, const CheckedFlags& flags, size_t host_count,
                                            bool from_slurm) {
  std::string host_words = plural(host_count, "host") +
                           (from_slurm ? " (Slurm job " + *spec::process_environment()("SLURM_JOB_ID") + ")"
                            : request.hosts.empty() && request.hostfile.empty()
                                ? " (this machine; list more with --hosts or --hostfile)"
                                : "");
  if (flags.nodes_min && !flags.ranged() && static_cast<size_t>(*flags.nodes_min) != host_count) {
    return "--nnodes " + *request.nnodes + ", but the job has " + host_words + "; dtrain starts every "
           "host itself, so --nnodes must equal the number of hosts, or drop it";
  }
  if (flags.ranged() && static_cast<size_t>(*flags.nodes_max) < host_count) {
    return "--nnodes " + *request.nnodes + " allows at most " + plural(*flags.nodes_max, "host") +
           ", but the job has " + host_words + "; list fewer hosts or raise the maximum";
  }
  // MIN above the host count is the loader's elastic.min_hosts message (pointed at --nnodes).
  if (flags.ranged()) {
    std::fprintf(stderr,
                 "dtrain run: --nnodes %s: starting on the job's %s; after losing hosts it goes on with "
                 "%s or more (elastic.min_hosts: %d); dtrain adds no hosts later\n",
                 request.nnodes->c_str(), plural(host_count, "host").c_str(), plural(*flags.nodes_min, "host").c_str(),
                 *flags.nodes_min);
  }
  return std::nullopt;
}

void warn_ignored(const RunRequest& request) {
  if (!request.ignored_rendezvous.empty()) {
    std::fprintf(stderr, "dtrain run: warning: ignored %s: dtrain does its own rendezvous, nothing to set up\n",
                 join(request.ignored_rendezvous, ", ").c_str());
  }
  if (!request.ignored_output.empty()) {
    std::fprintf(stderr, "dtrain run: warning: ignored %s: every rank's output is kept in the run directory "
                 "(dtrain logs RUN)\n", join(request.ignored_output, ", ").c_str());
  }
}

int run_command(const std::vector<std::string>& args) {
  RunRequest request;
  if (std::optional<std::string> error = parse_arguments(args, request)) return usage_error(*error);
  if (request.help) {
    std::fputs(kUsage, stdout);
    return to_int(ExitCode::ok);
  }
  Result<CheckedFlags> flags = check_flags(request);
  if (!flags) return usage_error(flags.error().message);

  char* cwd = get_current_dir_name();
  const std::string base_dir = cwd ? cwd : ".";
  std::free(cwd);
  // Inside a Slurm allocation (salloc, sbatch) with no host option: the allocation's nodes, and
  // Slurm's tasks per node unless -n says otherwise (spec: hosts: slurm).
  const bool from_slurm = request.hosts.empty() && request.hostfile.empty() &&
                          spec::in_slurm_allocation(spec::process_environment());
  std::string yaml = spec_yaml(request, *flags, base_dir, from_slurm);

  // Loaded here first, with the same loader and base directory submit uses, to check --nnodes
  // against the hosts it expands to and to point messages at flags; submit loads it again.
  const std::string source_name = "dtrain run";
  spec::LoadResult loaded = spec::parse_job_spec(yaml, source_name, base_dir, flags->overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", describe(loaded, source_name).c_str());
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
  submit.output = flags->output;
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
