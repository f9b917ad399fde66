#include "launcher/registry/registry_db.h"

#include <fcntl.h>
#include <unistd.h>

#include <sqlite3.h>
#include <sys/stat.h>

#include <utility>

#include "launcher/registry/statement.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain::registry {

namespace {

constexpr const char* kRebuildHint = "`dtrain registry rebuild` re-creates it from the run directories";

// Version 1. Times are Unix-epoch milliseconds (UTC); an open allocation has end_ms NULL.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL DEFAULT '',
  user TEXT NOT NULL DEFAULT '',
  name TEXT NOT NULL DEFAULT '',
  spec_hash TEXT NOT NULL DEFAULT '',
  run_dir TEXT NOT NULL DEFAULT '',
  submitted_ms INTEGER NOT NULL,
  started_ms INTEGER,
  ended_ms INTEGER,
  state TEXT NOT NULL DEFAULT '',
  exit_code INTEGER,
  exit_reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE allocations (
  run_id TEXT NOT NULL REFERENCES runs(id),
  generation INTEGER NOT NULL,
  host TEXT NOT NULL,
  units INTEGER NOT NULL,
  resource TEXT NOT NULL CHECK (resource IN ('gpu', 'slot')),
  start_ms INTEGER NOT NULL,
  end_ms INTEGER,
  end_reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX allocations_by_start ON allocations(start_ms);
CREATE INDEX allocations_by_run ON allocations(run_id);
CREATE TABLE failures (
  run_id TEXT NOT NULL REFERENCES runs(id),
  generation INTEGER NOT NULL,
  host TEXT NOT NULL DEFAULT '',
  rank INTEGER,
  kind TEXT NOT NULL,
  root_cause INTEGER NOT NULL DEFAULT 0,
  detected_ms INTEGER NOT NULL,
  recover_ms INTEGER
);
CREATE INDEX failures_by_host ON failures(host);
CREATE TABLE host_events (
  run_id TEXT NOT NULL REFERENCES runs(id),
  host TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('lost', 'excluded', 'rejoined')),
  reason TEXT NOT NULL DEFAULT '',
  at_ms INTEGER NOT NULL
);
CREATE TABLE audit (
  at_ms INTEGER NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  run_id TEXT NOT NULL DEFAULT '',
  target TEXT NOT NULL DEFAULT '',
  arguments TEXT NOT NULL DEFAULT '',
  result TEXT NOT NULL DEFAULT ''
);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit table is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit table is append-only'); END;
)sql";

// Version 2: hosts kept out of later runs' plans (registry_quarantine.h). No reference to runs:
// a manual quarantine has none, and a rebuild re-creates runs but keeps this table (its releases
// are in no run directory). Unique by host, source and since: a re-sync inserts nothing twice.
// failures_by_run: the cross-run rule looks up each failure's incident (run, generation).
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE quarantine (
  host TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  evidence TEXT NOT NULL DEFAULT '[]',
  since_ms INTEGER NOT NULL,
  until_ms INTEGER NOT NULL,
  source TEXT NOT NULL,
  released_ms INTEGER,
  released_by TEXT NOT NULL DEFAULT '',
  release_reason TEXT NOT NULL DEFAULT '',
  UNIQUE (host, source, since_ms)
);
CREATE INDEX quarantine_by_host ON quarantine(host);
CREATE INDEX IF NOT EXISTS failures_by_run ON failures(run_id, generation);
)sql";

/// Brings a file at `from_version` to kRegistrySchemaVersion, one step per version, each in the
/// caller's transaction. Version 0 is a new, empty file.
Status migrate_forward(RegistryDb& db, int from_version) {
  if (from_version < 1) {
    if (Status created = db.execute(kSchemaV1); !created) return created;
  }
  if (from_version < 2) {
    if (Status added = db.execute(kSchemaV2); !added) return added;
  }
  // Later versions add their step here: if (from_version < 3) { ... }
  return db.execute("PRAGMA user_version = " + std::to_string(kRegistrySchemaVersion));
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace

std::string registry_path() { return dtrain_home() + "/registry.db"; }

Error RegistryDb::error_of(const std::string& what) const {
  int code = db_ ? sqlite3_errcode(db_) : SQLITE_ERROR;
  std::string message = path_ + ": " + what + ": " + (db_ ? sqlite3_errmsg(db_) : "no database");
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
    return Error::user(message + "; the registry is damaged: " + kRebuildHint);
  }
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_FULL || code == SQLITE_IOERR ||
      code == SQLITE_CANTOPEN || code == SQLITE_READONLY) {
    return Error::infra(message);
  }
  return Error::internal(message);
}

Result<RegistryDb> RegistryDb::open(const std::string& path, bool create_if_missing) {
  if (!create_if_missing && !file_exists(path)) {
    return Error::user(path + ": no registry yet; `dtrain registry rebuild` builds it from the run directories");
  }
  // Private like the run directories (who ran what, for how long): a new registry is created
  // 0600 here (an empty file is an empty database); SQLite gives its -wal and -shm files the
  // database file's mode.
  if (create_if_missing && !file_exists(path)) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
  sqlite3* handle = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create_if_missing ? SQLITE_OPEN_CREATE : 0);
  int opened = sqlite3_open_v2(path.c_str(), &handle, flags, nullptr);
  RegistryDb db(handle, path);
  if (opened != SQLITE_OK) return db.error_of("cannot open");
  // A writer holds the lock for milliseconds; wait for it rather than fail a report.
  sqlite3_busy_timeout(handle, 5000);
  // The first read of a damaged or foreign file fails here (SQLITE_NOTADB), before any change.
  int version = 0;
  {
    Statement query(handle, "PRAGMA user_version");
    if (!query.ok()) return db.error_of("cannot read the schema version");
    int stepped = query.step();
    if (stepped != SQLITE_ROW) return db.error_of("cannot read the schema version");
    version = query.column_int(0);
  }
  if (version > kRegistrySchemaVersion) {
    return Error::user(path + ": registry schema version " + std::to_string(version) +
                       " is newer than this dtrain's (" + std::to_string(kRegistrySchemaVersion) +
                       "); use a newer dtrain, or " + kRebuildHint);
  }
  if (Status wal = db.execute("PRAGMA journal_mode = WAL"); !wal) return wal.error();
  if (Status keys = db.execute("PRAGMA foreign_keys = ON"); !keys) return keys.error();
  if (version < kRegistrySchemaVersion) {
    if (Status begun = db.execute("BEGIN IMMEDIATE"); !begun) return begun.error();
    // Re-read under the write lock: another process may have migrated it meanwhile.
    Statement again(handle, "PRAGMA user_version");
    int current = (again.ok() && again.step() == SQLITE_ROW) ? again.column_int(0) : version;
    again.finish();
    if (current < kRegistrySchemaVersion) {
      if (Status migrated = migrate_forward(db, current); !migrated) {
        (void)db.execute("ROLLBACK");
        return migrated.error();
      }
    }
    if (Status committed = db.execute("COMMIT"); !committed) return committed.error();
  }
  return db;
}

RegistryDb::RegistryDb(RegistryDb&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

RegistryDb& RegistryDb::operator=(RegistryDb&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

RegistryDb::~RegistryDb() {
  if (db_) sqlite3_close_v2(db_);
}

Status RegistryDb::execute(const std::string& sql) {
  char* message = nullptr;
  int result = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  if (message) sqlite3_free(message);
  if (result != SQLITE_OK) return error_of("cannot run '" + sql.substr(0, sql.find('\n', 1)) + "'");
  return Status::success();
}

Status RegistryDb::begin() { return execute("BEGIN IMMEDIATE"); }
Status RegistryDb::commit() { return execute("COMMIT"); }

namespace {

Status run_insert(RegistryDb& db, Statement& statement, const char* table) {
  if (!statement.ok() || statement.step() != SQLITE_DONE) {
    return db.error_of(std::string("cannot insert into ") + table);
  }
  return Status::success();
}

}  // namespace

Status RegistryDb::insert_run(const RunRow& run) {
  Statement insert(db_,
                   "INSERT OR REPLACE INTO runs (id, tenant, user, name, spec_hash, run_dir, submitted_ms,"
                   " started_ms, ended_ms, state, exit_code, exit_reason) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
  insert.bind(1, run.id).bind(2, run.tenant).bind(3, run.user).bind(4, run.name).bind(5, run.spec_hash);
  insert.bind(6, run.run_dir).bind(7, run.submitted_ms).bind(8, run.started_ms).bind(9, run.ended_ms);
  insert.bind(10, run.state).bind(11, run.exit_code).bind(12, run.exit_reason);
  return run_insert(*this, insert, "runs");
}

Status RegistryDb::insert_allocation(const AllocationRow& allocation) {
  Statement insert(db_,
                   "INSERT INTO allocations (run_id, generation, host, units, resource, start_ms, end_ms,"
                   " end_reason) VALUES (?,?,?,?,?,?,?,?)");
  insert.bind(1, allocation.run_id).bind(2, allocation.generation).bind(3, allocation.host);
  insert.bind(4, allocation.units).bind(5, allocation.resource).bind(6, allocation.start_ms);
  insert.bind(7, allocation.end_ms).bind(8, allocation.end_reason);
  return run_insert(*this, insert, "allocations");
}

Status RegistryDb::insert_failure(const FailureRow& failure) {
  Statement insert(db_,
                   "INSERT INTO failures (run_id, generation, host, rank, kind, root_cause, detected_ms,"
                   " recover_ms) VALUES (?,?,?,?,?,?,?,?)");
  insert.bind(1, failure.run_id).bind(2, failure.generation).bind(3, failure.host).bind(4, failure.rank);
  insert.bind(5, failure.kind).bind(6, failure.root_cause ? 1 : 0).bind(7, failure.detected_ms);
  insert.bind(8, failure.recover_ms);
  return run_insert(*this, insert, "failures");
}

Status RegistryDb::insert_host_event(const HostEventRow& event) {
  Statement insert(db_, "INSERT INTO host_events (run_id, host, kind, reason, at_ms) VALUES (?,?,?,?,?)");
  insert.bind(1, event.run_id).bind(2, event.host).bind(3, event.kind).bind(4, event.reason).bind(5, event.at_ms);
  return run_insert(*this, insert, "host_events");
}

Status RegistryDb::append_audit(const AuditRow& row) {
  Statement insert(db_,
                   "INSERT INTO audit (at_ms, actor, action, run_id, target, arguments, result)"
                   " VALUES (?,?,?,?,?,?,?)");
  insert.bind(1, row.at_ms).bind(2, row.actor).bind(3, row.action).bind(4, row.run_id).bind(5, row.target);
  insert.bind(6, row.arguments).bind(7, row.result);
  return run_insert(*this, insert, "audit");
}

}  // namespace dtrain::registry
