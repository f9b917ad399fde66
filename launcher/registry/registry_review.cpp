#include "launcher/registry/registry_review.h"

#include <sqlite3.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <tuple>

#include "launcher/registry/statement.h"

namespace dtrain::registry {
namespace {

/// SQLite's default limit on bound parameters is far above this; a month of runs is read in a
/// few statements.
constexpr size_t kRunsPerStatement = 500;

/// Runs `select_prefix` + " IN (?,...)" + `suffix` over run_ids in chunks, calling on_row for
/// each row.
Status each_run_row(RegistryDb& db, const std::vector<std::string>& run_ids, const std::string& select_prefix,
                    const std::string& suffix, const char* table, const std::function<void(Statement&)>& on_row) {
  for (size_t first = 0; first < run_ids.size(); first += kRunsPerStatement) {
    size_t count = std::min(kRunsPerStatement, run_ids.size() - first);
    std::string placeholders;
    for (size_t i = 0; i < count; ++i) placeholders += i ? ",?" : "?";
    Statement select(db.handle(), select_prefix + " IN (" + placeholders + ")" + suffix);
    if (!select.ok()) return db.error_of(std::string("reading ") + table);
    for (size_t i = 0; i < count; ++i) select.bind(static_cast<int>(i + 1), run_ids[first + i]);
    int step = SQLITE_ROW;
    while ((step = select.step()) == SQLITE_ROW) on_row(select);
    if (step != SQLITE_DONE) return db.error_of(std::string("reading ") + table);
  }
  return {};
}

std::optional<int64_t> optional_column(const Statement& statement, int column) {
  if (statement.column_is_null(column)) return std::nullopt;
  return statement.column_int64(column);
}

}  // namespace

Result<std::vector<AllocationRow>> allocations_of_runs(RegistryDb& db, const std::vector<std::string>& run_ids) {
  std::vector<AllocationRow> rows;
  Status read = each_run_row(
      db, run_ids,
      "SELECT run_id, generation, host, units, resource, start_ms, end_ms, end_reason FROM allocations WHERE run_id",
      "", "allocations", [&](Statement& row) {
        AllocationRow allocation;
        allocation.run_id = row.column_text(0);
        allocation.generation = row.column_int(1);
        allocation.host = row.column_text(2);
        allocation.units = row.column_int(3);
        allocation.resource = row.column_text(4);
        allocation.start_ms = row.column_int64(5);
        allocation.end_ms = optional_column(row, 6);
        allocation.end_reason = row.column_text(7);
        rows.push_back(std::move(allocation));
      });
  if (!read) return read.error();
  std::stable_sort(rows.begin(), rows.end(), [](const AllocationRow& a, const AllocationRow& b) {
    return std::tie(a.run_id, a.start_ms) < std::tie(b.run_id, b.start_ms);
  });
  return rows;
}

Result<std::vector<FailureRow>> failures_of_runs(RegistryDb& db, const std::vector<std::string>& run_ids) {
  std::vector<FailureRow> rows;
  Status read = each_run_row(
      db, run_ids,
      "SELECT run_id, generation, host, rank, kind, root_cause, detected_ms, recover_ms FROM failures WHERE run_id", "",
      "failures", [&](Statement& row) {
        FailureRow failure;
        failure.run_id = row.column_text(0);
        failure.generation = row.column_int(1);
        failure.host = row.column_text(2);
        if (!row.column_is_null(3)) failure.rank = row.column_int(3);
        failure.kind = row.column_text(4);
        failure.root_cause = row.column_int(5) != 0;
        failure.detected_ms = row.column_int64(6);
        failure.recover_ms = optional_column(row, 7);
        rows.push_back(std::move(failure));
      });
  if (!read) return read.error();
  std::stable_sort(rows.begin(), rows.end(),
                   [](const FailureRow& a, const FailureRow& b) { return a.detected_ms < b.detected_ms; });
  return rows;
}

}  // namespace dtrain::registry
