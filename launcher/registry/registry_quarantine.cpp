#include "launcher/registry/registry_quarantine.h"

#include <ctime>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "launcher/base/duration.h"
#include "launcher/registry/statement.h"

namespace dtrain::registry {

using nlohmann::json;

namespace {

constexpr const char* kColumns =
    "host, reason, evidence, since_ms, until_ms, source, released_ms, released_by, release_reason";

QuarantineRow row_of(const Statement& query) {
  QuarantineRow row;
  row.host = query.column_text(0);
  row.reason = query.column_text(1);
  // The evidence column is written here as JSON; a hand-edited one that no longer parses is
  // shown as the text it holds rather than failing the listing.
  std::string evidence = query.column_text(2);
  row.evidence = json::parse(evidence, nullptr, /*allow_exceptions=*/false);
  if (row.evidence.is_discarded()) row.evidence = json::array({evidence});
  row.since_ms = query.column_int64(3);
  row.until_ms = query.column_int64(4);
  row.source = query.column_text(5);
  if (!query.column_is_null(6)) row.released_ms = query.column_int64(6);
  row.released_by = query.column_text(7);
  row.release_reason = query.column_text(8);
  return row;
}

/// The rows `sql` (SELECT kColumns ...) selects, its parameters bound by `bind`.
Result<std::vector<QuarantineRow>> select_rows(RegistryDb& db, const std::string& sql,
                                               const std::function<void(Statement&)>& bind) {
  Statement query(db.handle(), sql);
  bind(query);
  if (!query.ok()) return db.error_of("cannot read the quarantine table");
  std::vector<QuarantineRow> rows;
  int stepped = SQLITE_ROW;
  while ((stepped = query.step()) == SQLITE_ROW) rows.push_back(row_of(query));
  if (stepped != SQLITE_DONE) return db.error_of("cannot read the quarantine table");
  return rows;
}

/// The failures the cross-run rule blames on their host: one per incident, i.e. per run and
/// generation (each failure ends its generation): the one marked root cause (a single failure, or
/// failure.root_cause moved the blame), else the first detected; what followed in the same
/// generation (an in-place recovery's survivors) is a consequence. A supervisor lost is its login
/// host's, no worker host's.
constexpr const char* kBlamedFailures = R"sql(
WITH blamed AS (
  SELECT f.run_id, f.host, f.detected_ms, f.kind, f.rank FROM failures f
  WHERE f.host != '' AND f.kind != 'supervisor.lost' AND (
    f.root_cause = 1 OR (
      NOT EXISTS (SELECT 1 FROM failures g WHERE g.run_id = f.run_id AND g.generation = f.generation AND g.root_cause = 1)
      AND NOT EXISTS (SELECT 1 FROM failures h WHERE h.run_id = f.run_id AND h.generation = f.generation
                      AND (h.detected_ms < f.detected_ms OR (h.detected_ms = f.detected_ms AND h.rowid < f.rowid))))))
)sql";

/// One root-cause failure of a host, as the cross-run rule counts it.
struct CountedFailure {
  std::string run_id;
  int64_t detected_ms = 0;
  std::string kind;
  std::optional<int> rank;
};

std::string cause_text(const CountedFailure& failure) {
  return failure.kind + (failure.rank ? " (rank " + std::to_string(*failure.rank) + ")" : "");
}

}  // namespace

std::string quarantine_time_text(int64_t wall_ms) {
  std::time_t seconds = static_cast<std::time_t>(wall_ms / 1000);
  std::tm utc{};
  if (!::gmtime_r(&seconds, &utc)) return std::to_string(wall_ms);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

Status insert_quarantine(RegistryDb& db, const QuarantineRow& row) {
  Statement insert(db.handle(),
                   "INSERT OR IGNORE INTO quarantine (host, reason, evidence, since_ms, until_ms, source, released_ms,"
                   " released_by, release_reason) VALUES (?,?,?,?,?,?,?,?,?)");
  // Host names and reasons come from run logs: replace invalid UTF-8 rather than throw.
  insert.bind(1, row.host).bind(2, row.reason).bind(3, row.evidence.dump(-1, ' ', false, json::error_handler_t::replace));
  insert.bind(4, row.since_ms).bind(5, row.until_ms).bind(6, row.source).bind(7, row.released_ms);
  insert.bind(8, row.released_by).bind(9, row.release_reason);
  if (!insert.ok() || insert.step() != SQLITE_DONE) return db.error_of("cannot insert into quarantine");
  return Status::success();
}

Result<std::vector<QuarantineRow>> quarantine_rows(RegistryDb& db, const std::optional<std::string>& host) {
  std::string sql = std::string("SELECT ") + kColumns + " FROM quarantine" + (host ? " WHERE host = ?1" : "") +
                    " ORDER BY since_ms DESC, host";
  return select_rows(db, sql, [&](Statement& query) {
    if (host) query.bind(1, *host);
  });
}

Result<std::vector<QuarantineRow>> active_quarantines(RegistryDb& db, int64_t now_ms) {
  // Only the active rows are read: the table keeps every past quarantine, and every plan reads this.
  Result<std::vector<QuarantineRow>> rows =
      select_rows(db, std::string("SELECT ") + kColumns + " FROM quarantine WHERE released_ms IS NULL AND until_ms > ?1",
                  [&](Statement& query) { query.bind(1, now_ms); });
  if (!rows) return rows;
  std::map<std::string, QuarantineRow> by_host;
  for (QuarantineRow& row : *rows) {
    auto found = by_host.find(row.host);
    if (found == by_host.end() || found->second.until_ms < row.until_ms) by_host[row.host] = std::move(row);
  }
  std::vector<QuarantineRow> active;
  for (auto& [host, row] : by_host) active.push_back(std::move(row));
  return active;
}

Result<int> release_quarantine(RegistryDb& db, const std::string& host, int64_t now_ms, const std::string& released_by,
                               const std::string& reason) {
  Statement update(db.handle(),
                   "UPDATE quarantine SET released_ms = ?2, released_by = ?3, release_reason = ?4"
                   " WHERE host = ?1 AND released_ms IS NULL AND until_ms > ?2");
  update.bind(1, host).bind(2, now_ms).bind(3, released_by).bind(4, reason);
  if (!update.ok() || update.step() != SQLITE_DONE) return db.error_of("cannot release " + host);
  return sqlite3_changes(db.handle());
}

Result<std::vector<QuarantineRow>> apply_cross_run_rule(RegistryDb& db, const std::string& run_id,
                                                        const QuarantineRule& rule) {
  std::vector<QuarantineRow> added;
  if (rule.after <= 0) return added;
  Statement hosts(db.handle(), std::string(kBlamedFailures) + " SELECT DISTINCT host FROM blamed WHERE run_id = ?1");
  hosts.bind(1, run_id);
  if (!hosts.ok()) return db.error_of("cannot read failures");
  std::vector<std::string> blamed;
  while (hosts.step() == SQLITE_ROW) blamed.push_back(hosts.column_text(0));
  hosts.finish();

  for (const std::string& host : blamed) {
    Result<std::vector<QuarantineRow>> held = quarantine_rows(db, host);
    if (!held) return held.error();
    // This run's supervisor quarantined it already (host.quarantined): one row per run and host.
    if (std::any_of(held->begin(), held->end(), [&](const QuarantineRow& row) { return row.source == run_id; })) continue;
    Statement query(db.handle(), std::string(kBlamedFailures) +
                                     " SELECT run_id, detected_ms, kind, rank FROM blamed WHERE host = ?1"
                                     " ORDER BY detected_ms, run_id");
    query.bind(1, host);
    if (!query.ok()) return db.error_of("cannot read failures");
    std::vector<CountedFailure> failures;
    while (query.step() == SQLITE_ROW) {
      CountedFailure failure{query.column_text(0), query.column_int64(1), query.column_text(2), std::nullopt};
      if (!query.column_is_null(3)) failure.rank = query.column_int(3);
      failures.push_back(std::move(failure));
    }
    for (const CountedFailure& end : failures) {
      if (end.run_id != run_id) continue;
      // Released before this failure: what came before the release was forgiven with it.
      int64_t counted_from = end.detected_ms - rule.window_ms;
      bool covered = false;
      for (const QuarantineRow& row : *held) {
        if (row.released_ms && *row.released_ms <= end.detected_ms) counted_from = std::max(counted_from, *row.released_ms + 1);
        if (row.since_ms <= end.detected_ms && row.until_ms > end.detected_ms &&
            (!row.released_ms || *row.released_ms > end.detected_ms)) {
          covered = true;
        }
      }
      if (covered) continue;
      std::vector<const CountedFailure*> in_window;
      for (const CountedFailure& failure : failures) {
        if (failure.detected_ms >= counted_from && failure.detected_ms <= end.detected_ms) in_window.push_back(&failure);
      }
      if (static_cast<int>(in_window.size()) < rule.after) continue;
      QuarantineRow row;
      row.host = host;
      std::set<std::string> runs;
      for (const CountedFailure* failure : in_window) {
        runs.insert(failure->run_id);
        row.evidence.push_back({{"run_id", failure->run_id},
                                {"at", quarantine_time_text(failure->detected_ms)},
                                {"cause", cause_text(*failure)}});
      }
      row.reason = "root cause of " + std::to_string(in_window.size()) + " failures in " + std::to_string(runs.size()) +
                   (runs.size() == 1 ? " run" : " runs") + " within " + format_duration(Millis(rule.window_ms)) +
                   " (health.quarantine.after " + std::to_string(rule.after) + ")";
      row.since_ms = end.detected_ms;
      row.until_ms = end.detected_ms + rule.duration_ms;
      row.source = run_id;
      if (Status inserted = insert_quarantine(db, row); !inserted) return inserted.error();
      added.push_back(std::move(row));
      break;  // one row per run and host: the first window that reached the count
    }
  }
  return added;
}

}  // namespace dtrain::registry
