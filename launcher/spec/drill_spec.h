#pragma once
// drill.yaml: what `dtrain drill --spec` runs (see configs/drill.yaml, man/dtrain-drill.1). Read
// here because launcher/spec is the only yaml-cpp user; launcher/drill grades and injects.
//
//   version: 1
//   job: ../quickstart.yaml          # a job spec path (relative to this file), or an inline mapping
//   set: {elastic.max_restarts: 3}   # --set overrides for the job
//   timeout: 10m                     # the whole drill, job included (default 10m)
//   faults:
//     - {fault: kill-rank, target: 1, at_step: 60}
//     - {fault: slow-storage, delay: 2s}
//     - {fault: partition-host, target: gpu02,
//        partition: {cut: "switchctl down {host}", heal: "switchctl up {host}", duration: 90s}}
//     - {fault: partition-host, target: gpu03, partition: {method: firewall}}   # opt-in
//     - {fault: kill-host, target: gpu02}
//     - {fault: kill-supervisor}
//   objectives: {detect: 10s, recover: 60s, max_lost_steps: 100}

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::spec {

/// Fault kinds a drill spec may name (launcher/drill decides which it can inject).
const std::vector<std::string>& drill_fault_kinds();

/// `partition:` of a partition-host entry: how to cut the host off.
struct DrillPartition {
  std::string method;              ///< "commands" (cut + heal given) or "firewall" (the opt-in)
  std::string cut;                 ///< shell command, "{host}" replaced by the host name
  std::string heal;
  std::optional<Millis> duration;  ///< the longest the host stays cut off
};

/// One entry of `faults:`.
struct DrillFaultEntry {
  std::string fault;               ///< one of drill_fault_kinds()
  std::string target;              ///< "1" (a rank), a host name, or "" when the kind needs none
  std::optional<int64_t> at_step;  ///< inject once every rank has reached this step
  std::optional<Millis> delay;     ///< slow-storage: how long each checkpoint write is held
  std::optional<DrillPartition> partition;  ///< partition-host: required there, refused elsewhere
  std::string where;               ///< "drill.yaml:7:5", for messages about this entry
};

/// Recovery objectives; an absent one is not graded.
struct DrillObjectives {
  std::optional<Millis> detect;            ///< fault injected → failure.detected
  std::optional<Millis> recover;           ///< fault injected → first step of the new generation
  std::optional<int64_t> max_lost_steps;   ///< recovery.completed steps_lost
};

struct DrillSpec {
  std::string source_path;
  std::string job_path;         ///< resolved path of the job spec; empty when `job` is inline
  std::string inline_job_yaml;  ///< the inline `job:` mapping as YAML text; empty otherwise
  std::vector<Override> sets;   ///< `set:` as --set overrides, in file order
  Millis timeout{600'000};
  std::vector<DrillFaultEntry> faults;
  DrillObjectives objectives;
};

struct DrillSpecResult {
  std::optional<DrillSpec> spec;        ///< set only when there are no diagnostics
  std::vector<Diagnostic> diagnostics;  ///< every problem found
  bool ok() const { return spec.has_value(); }
  std::string message() const;
};

/// Reads and checks a drill spec file; `job` resolves relative to its directory.
DrillSpecResult load_drill_spec(const std::string& path);

/// Same, from text (`source_name` in diagnostics, `base_dir` for a relative `job` path).
DrillSpecResult parse_drill_spec(const std::string& yaml_text, const std::string& source_name,
                                 const std::string& base_dir);

/// `--slo FILE`: a YAML mapping with detect / recover / max_lost_steps, at the top level or
/// under `objectives:` (so a drill.yaml can serve as the SLO file). Errors name file:line:col.
Result<DrillObjectives> load_drill_objectives(const std::string& path);

}  // namespace dtrain::spec
