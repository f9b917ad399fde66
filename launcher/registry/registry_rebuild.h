#pragma once
// `dtrain registry rebuild`: the registry re-created from the run directories, which stay the
// source of truth (also for runs made before the registry existed).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/events/event.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_quarantine.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_snapshot.h"

namespace dtrain::registry {

/// What one run directory adds to the registry.
struct RunRecords {
  RunRow run;
  std::vector<AllocationRow> allocations;
  std::vector<FailureRow> failures;
  std::vector<HostEventRow> host_events;
  std::vector<QuarantineRow> quarantines;  ///< its host.quarantined events (source: the run)
  /// The run's spec's health.quarantine, for the cross-run rule (apply_cross_run_rule) applied
  /// when the records are written.
  QuarantineRule quarantine_rule;
};

/// The rows for the run in `run_dir` from its events (oldest first; read_logged_events order) and its
/// state.json (`state`, a default RunSnapshot when unreadable). Generations: each one holds the hosts
/// of its plan.generation event from that event until the next generation's plan, the run's
/// run.finished, or (for one host) that host's host.lost; a host holds
/// as many units as it started workers in that generation (else world_size / hosts). A run whose
/// log ends without run.finished: open allocations when `still_running`, else they end at the
/// last event and the run's state is "supervisor gone". Hosts whose host.facts list GPUs hold
/// GPUs; others hold worker slots.
RunRecords records_from_events(const std::string& run_id, const std::string& run_dir,
                               const std::vector<LoggedEvent>& events, const RunSnapshot& state, bool still_running);

/// True for the events records_from_events reads (the supervisor's live writer keeps only these).
bool records_read_event(const events::Event& event);

/// `event` reduced to what records_from_events reads (a host.facts keeps only whether it lists
/// GPUs, a run.finished no incidents): at 16,384 ranks the whole events held 50 MB more in the
/// supervisor.
LoggedEvent fields_records_read(LoggedEvent event);

struct RebuildSummary {
  int runs = 0;
  int allocations = 0;
  int skipped_lines = 0;          ///< damaged events.jsonl lines, skipped
  int audit_rows_kept = 0;        ///< copied from the registry being replaced
  std::vector<std::string> warnings;  ///< runs that could not be read, lines skipped, audit lost
};

/// The tenant named by a run directory's spec copy (spec.yaml), for runs whose events do not say
/// (made before run.submitted carried it). The CLI passes the spec loader's reading of it; the
/// registry does not parse YAML.
using TenantOfSpec = std::function<std::string(const std::string& spec_path)>;

/// The health.quarantine settings of a run directory's spec copy, for the cross-run rule; as
/// with TenantOfSpec, the caller reads the YAML. Unset: the defaults of QuarantineRule.
using QuarantineRuleOfSpec = std::function<QuarantineRule(const std::string& spec_path)>;

/// Re-creates the registry's runs, allocations, failures and host events from every run
/// directory under `runs_root`. A healthy registry is rebuilt in place in one transaction (readers
/// see the old rows or the new; the audit and quarantine tables are kept: releases and manual
/// quarantines are in no run directory, and the runs' quarantines are inserted only where
/// missing). A damaged one is moved aside as `<file>.damaged`, a new one is made, and what the
/// old audit and quarantine tables still give is copied over.
Result<RebuildSummary> rebuild_registry(const std::string& registry_file, const std::string& runs_root,
                                        const TenantOfSpec& tenant_of_spec = {},
                                        const QuarantineRuleOfSpec& rule_of_spec = {});

/// Replaces one run's rows (its runs row, allocations, failures, host events) in one transaction:
/// the supervisor's live writes, each a complete picture of the run so far. Its quarantines are
/// inserted where missing (never replaced: a release stays) and the cross-run rule is applied.
Status replace_run_records(RegistryDb& db, const RunRecords& records);

/// Fills what the events may not say: the user (the run directory's owner), the tenant (from the
/// spec copy, through `tenant_of_spec`) and the spec hash.
void complete_run_identity(RunRecords& records, const std::string& spec_path, const TenantOfSpec& tenant_of_spec);

/// A short hash of the spec copy in a run directory (empty when unreadable, a link, not a regular
/// file or over 16 MiB).
std::string spec_hash_of(const std::string& spec_path);

}  // namespace dtrain::registry
