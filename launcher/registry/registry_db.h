#pragma once
// $DTRAIN_HOME/registry.db: runs, allocations (the fact table GPU-hours come from), failures,
// host events, quarantined hosts (registry_quarantine.h) and an append-only audit table. SQLite in WAL mode with a busy timeout, so a usage
// report and a writer do not block each other; the schema is versioned by PRAGMA user_version
// and migrated forward on open. Nothing here is on the training path: a registry that is locked,
// damaged or on a full disk is an error for the command that asked, never for a run.

#include <cstdint>
#include <optional>
#include <string>

#include "launcher/base/result.h"

struct sqlite3;

namespace dtrain::registry {

/// The schema this dtrain writes; older files are migrated forward on open.
/// 2: the quarantine table (registry_quarantine.h).
inline constexpr int kRegistrySchemaVersion = 2;

/// dtrain_home() + "/registry.db".
std::string registry_path();

struct RunRow {
  std::string id;
  std::string tenant;  ///< empty: none in the spec
  std::string user;
  std::string name;
  std::string spec_hash;
  std::string run_dir;
  int64_t submitted_ms = 0;
  std::optional<int64_t> started_ms;  ///< the first generation's spawn
  std::optional<int64_t> ended_ms;    ///< run.finished; none while it runs
  std::string state;
  std::optional<int> exit_code;
  std::string exit_reason;
};

/// One host held by one generation of a run: `units` GPUs (resource "gpu") or worker slots on
/// a CPU host (resource "slot") from start_ms to end_ms (none: still held).
struct AllocationRow {
  std::string run_id;
  int generation = 0;
  std::string host;
  int units = 0;
  std::string resource = "gpu";
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;
  std::string end_reason;
};

struct FailureRow {
  std::string run_id;
  int generation = 0;
  std::string host;
  std::optional<int> rank;
  std::string kind;
  bool root_cause = false;
  int64_t detected_ms = 0;
  std::optional<int64_t> recover_ms;  ///< detection to the next generation's first step
};

struct HostEventRow {
  std::string run_id;
  std::string host;
  std::string kind;  ///< lost, excluded, rejoined
  std::string reason;
  int64_t at_ms = 0;
};

struct AuditRow {
  int64_t at_ms = 0;
  std::string actor;  ///< login user, and "(sudo from X)" when SUDO_USER is set
  std::string action;
  std::string run_id;
  std::string target;
  std::string arguments;  ///< secrets already redacted by the caller
  std::string result;
};

/// An open registry. Move-only; closes on destruction.
class RegistryDb {
 public:
  /// Opens `path`, creating the file and the schema when it does not exist (create_if_missing)
  /// and migrating an older schema forward. Errors name the file and, for a damaged or foreign
  /// file, the repair: "`dtrain registry rebuild` re-creates it from the run directories".
  /// A missing file without create_if_missing is an error that says how to build it.
  static Result<RegistryDb> open(const std::string& path, bool create_if_missing);

  RegistryDb(RegistryDb&& other) noexcept;
  RegistryDb& operator=(RegistryDb&& other) noexcept;
  RegistryDb(const RegistryDb&) = delete;
  RegistryDb& operator=(const RegistryDb&) = delete;
  ~RegistryDb();

  /// Groups many inserts in one transaction (a rebuild, a benchmark fill): one fsync, not one each.
  Status begin();
  Status commit();

  Status insert_run(const RunRow& run);
  Status insert_allocation(const AllocationRow& allocation);
  Status insert_failure(const FailureRow& failure);
  Status insert_host_event(const HostEventRow& event);
  /// Appends to the audit table; triggers refuse every UPDATE and DELETE of it.
  Status append_audit(const AuditRow& row);

  /// Runs one statement (no result rows); errors name the file. For tests and migrations.
  Status execute(const std::string& sql);

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  /// "<path>: <what failed>: <sqlite's message>", with the rebuild hint for damaged files.
  Error error_of(const std::string& what) const;

 private:
  RegistryDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace dtrain::registry
