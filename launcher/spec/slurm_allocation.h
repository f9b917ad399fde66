#pragma once
// `hosts: slurm`: the hosts and slots of the Slurm allocation dtrain runs in (salloc, sbatch),
// read from the environment Slurm gives every job step.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::spec {

/// Looks an environment variable up; nullopt when unset. Injected so that tests need no Slurm.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// The process environment (getenv).
EnvLookup process_environment();

/// True when `env` is inside a Slurm allocation (SLURM_JOB_ID set).
bool in_slurm_allocation(const EnvLookup& env);

/// SLURM_TASKS_PER_NODE, e.g. "2(x3),1" → {2, 2, 2, 1}: comma-separated counts, each optionally
/// repeated with "(xN)".
Result<std::vector<int>> parse_tasks_per_node(std::string_view text);

struct SlurmAllocation {
  std::string job_id;
  std::vector<HostEntry> hosts;  ///< in SLURM_JOB_NODELIST order, each with its slots
  std::string slots_from;        ///< which variable gave the slots, for messages
};

/// The allocation's hosts from SLURM_JOB_NODELIST (SLURM_NODELIST in older Slurm), expanded with
/// the hostlist parser, and their slots: `slots_per_host` when the spec sets it (> 0); else the
/// tasks Slurm planned per node (SLURM_TASKS_PER_NODE) when the job asked for tasks
/// (--ntasks / --ntasks-per-node); else one per GPU (SLURM_GPUS_ON_NODE, the same on every node
/// of a job); else SLURM_TASKS_PER_NODE (one per node by default). Outside an allocation, or
/// with variables that do not agree, an Error that says what to do.
Result<SlurmAllocation> read_slurm_allocation(const EnvLookup& env, int slots_per_host);

/// A job's time left as squeue prints it (`squeue -h -j ID -o %L`): "MM:SS", "H:MM:SS",
/// "D-HH:MM:SS", "D-HH" or "D-HH:MM", in ms; nullopt for "UNLIMITED", "NOT_SET", "INVALID" or
/// anything else.
std::optional<int64_t> parse_slurm_time_left_ms(std::string_view text);

}  // namespace dtrain::spec
