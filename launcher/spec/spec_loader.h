#pragma once
// YAML → JobSpec with file:line:col diagnostics, defaults and validation. The only yaml-cpp
// user in the project.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::spec {

/// One problem in a spec: where, which key, what, and the fix.
struct Diagnostic {
  std::string file;    ///< "job.yaml", or "--set" for a command-line override
  int line = 0;        ///< 1-based; 0 when unknown
  int column = 0;      ///< 1-based; 0 when unknown
  std::string key;     ///< dotted path: "heartbeat.timeout"
  std::string message; ///< "'5x' has unknown unit 'x'; write a number with a unit: 500ms, ..."

  /// "job.yaml:12:3: heartbeat.timeout: '5x' has unknown unit 'x'; ..."
  std::string to_string() const;
};

/// `--set key=value`: overrides a spec key by its dotted path before validation.
struct Override {
  std::string key;
  std::string value;
};

struct LoadResult {
  std::optional<JobSpec> spec;          ///< set only when there are no diagnostics
  std::vector<Diagnostic> diagnostics;  ///< every problem found, not just the first
  std::vector<Diagnostic> warnings;     ///< worth saying, not stopping for (an env_file whose names changed)

  bool ok() const { return spec.has_value(); }
  /// All diagnostics, one per line.
  std::string message() const;
};

/// What the loader does with the worker variables a spec keeps outside itself: the env_file's
/// values and worker.pass_env's (taken from this process's environment).
enum class EnvValues {
  read,        ///< read them (to run workers, or to check a spec): a missing one is an error
  names_only,  ///< leave them out of `env` (a run's spec.yaml read for its hosts or settings)
};

/// Reads and validates the spec at `path`; hostfile/env_file paths resolve relative to it.
LoadResult load_job_spec(const std::string& path, const std::vector<Override>& overrides = {},
                         EnvValues env_values = EnvValues::read);

/// Same, from text. `source_name` names it in diagnostics; `base_dir` resolves relative paths.
LoadResult parse_job_spec(const std::string& yaml_text, const std::string& source_name,
                          const std::string& base_dir, const std::vector<Override>& overrides = {},
                          EnvValues env_values = EnvValues::read);

/// "elastic.max_restarts=3" → {key, value}; a missing '=' or empty key is a user error.
Result<Override> parse_override(std::string_view text);

/// The resolved spec as YAML (hosts expanded, defaults filled): written to the run directory as
/// spec.yaml; parsing it again gives an equal JobSpec. It holds no secret: worker.env names that
/// looks_secret are written as worker.pass_env names, and the env_file as its path and names.
std::string to_yaml(const JobSpec& spec);

/// Slurm/pdsh hostlist: "gpu[01-04,07]", "node[1-2]-ib[0-1]", "a,b" → names, zero padding kept.
Result<std::vector<std::string>> expand_hostlist(std::string_view expression);

/// DeepSpeed / Open MPI hostfile: "worker-1 slots=4", bare "host" lines, '#' comments.
Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& source_name);

/// DeepSpeed-style filters: include "worker-0@worker-1:0,2" keeps worker-0 (all slots) and
/// slots 0 and 2 of worker-1; exclude removes whole hosts or single slots. Unknown hosts are
/// errors that name them.
Result<std::vector<HostEntry>> apply_include_exclude(std::vector<HostEntry> hosts,
                                                     std::string_view include,
                                                     std::string_view exclude);

}  // namespace dtrain::spec
