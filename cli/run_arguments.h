#pragma once
// `dtrain run`'s command line, parsed: dtrain's own flags and every option of torchrun (1.13 to
// today's), from argv and, for torchrun's, from the PET_* variables torchrun reads them from.
// One table (run_arguments.cpp) holds every option: its spellings, its PET_ variable and what it
// does here, so that no option can be accepted on the command line and forgotten in the
// environment. cli/run_command.cpp turns the result into a job spec.

#include <optional>
#include <string>
#include <vector>

#include "launcher/spec/slurm_allocation.h"

namespace dtrain::cli {

/// A value an option was given, and where: on the command line or in its PET_ variable.
struct GivenValue {
  std::string value;
  std::string variable;  ///< "PET_MAX_RESTARTS" when the value came from there, else ""

  /// For a message: `label 'value'` for a flag (label: the flag's name in messages, such as
  /// "-n/--nproc-per-node"), `PET_X='value'` for a variable.
  std::string quoted(const std::string& label) const;
  /// `label`, or the variable's name.
  std::string origin(const std::string& label) const;
};

/// What the command line (and the PET_ variables) asked for, before it becomes YAML.
struct RunRequest {
  std::optional<GivenValue> procs_per_host;  ///< -n: a number, or torchrun's gpu, cpu, auto
  std::optional<GivenValue> max_restarts;
  std::optional<GivenValue> nnodes;            ///< N or MIN:MAX
  std::optional<GivenValue> node_rank;         ///< accepted only as 0 on a one-host job
  std::optional<GivenValue> shutdown_timeout;  ///< seconds: the spec's stop_grace
  std::optional<GivenValue> role;              ///< the workers' ROLE_NAME
  std::string hosts;
  std::string hostfile;
  std::vector<std::string> sets;
  std::string name;
  std::string output = "auto";  ///< --output all|rank0|none|auto: whose lines the terminal shows
  bool detach = false;
  bool over_quota = false;
  bool help = false;
  /// Switches: set when on, to where they were turned on ("-m", "PET_MODULE=1"). --run-path
  /// wins over -m and --no-python as in torchrun: the parse clears those two when it is on.
  std::optional<std::string> module, no_python, run_path;
  bool after_separator = false;      ///< the command came after `--`
  std::vector<std::string> command;  ///< the words after the options

  /// An option accepted that changes nothing here: its spelling (or variable) and why.
  struct Ignored {
    std::string name;
    const char* because;
  };
  std::vector<Ignored> ignored;
  /// torchrun's output options (--redirects, --tee, --log-dir, --local-ranks-filter), kept
  /// apart: they map onto --output (run_command.cpp) unless --output is given.
  struct TorchrunOutput {
    std::string origin;  ///< as given: "--tee", "-t", "PET_TEE"
    std::string option;  ///< its long dash spelling: "--tee"
    std::string value;
  };
  std::vector<TorchrunOutput> torchrun_output;
  bool output_given = false;  ///< --output on the command line
};

/// Parses `args` (the words after `dtrain run`) into `request`, then reads, for every torchrun
/// option the command line did not give, its PET_ variable from `env` (an explicit flag wins;
/// an empty variable counts as unset; a switch is on when its variable is a non-zero number, as
/// torchrun's int() reads it). An error is the message to print: it names the flag or variable.
std::optional<std::string> parse_run_arguments(const std::vector<std::string>& args, const spec::EnvLookup& env,
                                               RunRequest& request);

}  // namespace dtrain::cli
