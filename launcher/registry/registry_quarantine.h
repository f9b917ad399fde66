#pragma once
// The registry's quarantine table (issue 29): hosts kept out of every later run's plan. A row
// comes from a run (its host.quarantined events, or the cross-run rule below, source = the run
// id) or from `dtrain hosts quarantine` (source "manual"). A row is active while it is not
// released and its until lies ahead; an expired one is probation: the host is planned again and
// its start health check decides. Rows are never deleted: a release stamps released_ms, by whom
// and why, so a re-sync or a rebuild of the same run directories cannot bring a released
// quarantine back (the table survives `dtrain registry rebuild`; rows are unique by host, source
// and since).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

/// The source of a quarantine made by hand (`dtrain hosts quarantine`).
inline constexpr const char* kManualQuarantine = "manual";

struct QuarantineRow {
  std::string host;
  std::string reason;
  nlohmann::json evidence = nlohmann::json::array();  ///< strings, or {run_id, at, cause} objects
  int64_t since_ms = 0;
  int64_t until_ms = 0;
  std::string source;  ///< the run id that quarantined it, or kManualQuarantine
  std::optional<int64_t> released_ms;
  std::string released_by;
  std::string release_reason;

  /// Not released, and until still ahead of now_ms.
  bool active_at(int64_t now_ms) const { return !released_ms && until_ms > now_ms; }
};

/// health.quarantine of the spec of the run being recorded (launcher/registry does not depend on
/// launcher/spec; the callers copy spec::HealthSettings' three fields). after 0: the rule is off.
struct QuarantineRule {
  int after = 3;
  int64_t window_ms = 24LL * 3600 * 1000;
  int64_t duration_ms = 7LL * 24 * 3600 * 1000;
};

/// Inserts `row` unless one with its host, source and since exists (then nothing changes: the
/// same event synced twice, or rebuilt, is one row, and a release of it stays).
Status insert_quarantine(RegistryDb& db, const QuarantineRow& row);

/// Every row (released and expired too), newest first; `host` given: that host's only.
Result<std::vector<QuarantineRow>> quarantine_rows(RegistryDb& db, const std::optional<std::string>& host = {});

/// The rows active at now_ms, by host (one per host: the one that lasts longest).
Result<std::vector<QuarantineRow>> active_quarantines(RegistryDb& db, int64_t now_ms);

/// Releases every active row of `host` at now_ms; returns how many it released (0: the host was
/// not quarantined).
Result<int> release_quarantine(RegistryDb& db, const std::string& host, int64_t now_ms, const std::string& released_by,
                               const std::string& reason);

/// The cross-run rule for a run whose failures the registry just recorded: for each host that is
/// the root cause of a failure of run `run_id` (per incident, i.e. run and generation: the failure
/// marked root cause, else the first detected), the root-cause failures of that host in every run
/// (none before its latest release) are counted in the window that ends at each of this run's
/// failures, oldest first; at the first that reaches rule.after, the host is quarantined from
/// that failure's time for rule.duration_ms, with the failures as evidence — unless this run
/// already quarantined it (host.quarantined) or a quarantine was active at that time. The row is
/// keyed by that failure's time, so a re-sync or a rebuild writes it once. Returns the rows it
/// added.
Result<std::vector<QuarantineRow>> apply_cross_run_rule(RegistryDb& db, const std::string& run_id,
                                                        const QuarantineRule& rule);

/// "2026-12-12T08:00:00Z": how until and since read in listings and in plan.quarantined.
std::string quarantine_time_text(int64_t wall_ms);

}  // namespace dtrain::registry
