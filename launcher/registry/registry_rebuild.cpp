#include "launcher/registry/registry_rebuild.h"

#include <dirent.h>
#include <pwd.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "launcher/events/event.h"
#include "launcher/base/regular_file.h"
#include "launcher/registry/statement.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"

namespace dtrain::registry {

using nlohmann::json;

namespace {

/// spec.yaml in a run directory: the resolved spec, under the 16 MiB of any spec.
constexpr size_t kMaxSpecCopyBytes = size_t{16} << 20;

/// One generation as the events tell it, until its allocations can be written.
struct GenerationSpan {
  int number = 0;
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;
  std::string end_reason;
  std::vector<std::string> hosts;
  int world_size = 0;
  std::map<std::string, int> workers_started;  // by host
  std::map<std::string, std::pair<int64_t, std::string>> host_ended;  // a lost host: when, why
};

void end_generation(GenerationSpan& generation, int64_t at_ms, const std::string& reason) {
  if (generation.end_ms) return;
  generation.end_ms = at_ms;
  generation.end_reason = reason;
}

}  // namespace

namespace {

/// Reads a run's events into its rows, one event at a time (records_from_events).
class RecordsBuilder {
 public:
  RecordsBuilder(const std::string& run_id, const std::string& run_dir, const RunSnapshot& state) {
    RunRow& run = records_.run;
    run.id = run_id;
    run.run_dir = run_dir;
    // state.json: what the events do not say (a run from before run.submitted named them).
    run.name = state.name;
    run.tenant = state.tenant;
    run.user = state.user;
    run.state = state.state;
    run.exit_code = state.exit_code;
    run.submitted_ms = state.submitted_at_ms.value_or(0);
    run.ended_ms = state.finished_at_ms;
  }

  void add(const LoggedEvent& logged) {
    std::optional<int64_t> at = logged.wall_ms();
    if (!at) return;
    last_ms_ = std::max(last_ms_, *at);
    at_ = *at;
    gen_ = logged.gen;
    std::visit(events::Overloaded{[this](const auto& event) { on(event); }}, logged.event);
  }

  RunRecords finish(bool still_running, std::optional<int64_t> first_ms);

 private:
  GenerationSpan* current() { return generations_.empty() ? nullptr : &generations_.back(); }

  void on(const events::RunSubmitted& submitted) {
    RunRow& run = records_.run;
    if (run.name.empty()) run.name = submitted.run_name;
    if (run.tenant.empty()) run.tenant = submitted.tenant;
    if (run.user.empty()) run.user = submitted.user;
    run.submitted_ms = at_;  // the log's own time wins over state.json's (a live write has no state.json)
  }
  void on(const events::PlanGeneration& plan) {
    GenerationSpan* previous = current();
    int number = gen_.value_or(previous ? previous->number + 1 : 0);
    if (previous) end_generation(*previous, at_, "generation " + std::to_string(number));
    GenerationSpan next;
    next.number = number;
    next.start_ms = at_;
    next.hosts = plan.hosts;
    next.world_size = plan.world_size;
    generations_.push_back(std::move(next));
  }
  void on(const events::RunState& state) {
    if (!state.state.empty()) records_.run.state = state.state;
  }
  void on(const events::GenerationSpawned&) {
    if (!records_.run.started_ms) records_.run.started_ms = at_;
  }
  void on(const events::WorkerStarted& started) {
    GenerationSpan* owner = current();
    if (gen_) {
      auto found = std::find_if(generations_.begin(), generations_.end(),
                                [&](const GenerationSpan& generation) { return generation.number == *gen_; });
      owner = found == generations_.end() ? nullptr : &*found;
    }
    if (owner) owner->workers_started[started.host]++;
  }
  void on(const events::HostLost& lost) {
    GenerationSpan* open = current();
    if (open && !open->end_ms && std::find(open->hosts.begin(), open->hosts.end(), lost.host) != open->hosts.end()) {
      open->host_ended.emplace(lost.host, std::make_pair(at_, "host lost: " + lost.reason));
    }
    records_.host_events.push_back({records_.run.id, lost.host, "lost", lost.reason, at_});
    lost_hosts_.insert(lost.host);
  }
  void on(const events::HostExcluded& excluded) {
    records_.host_events.push_back({records_.run.id, excluded.host, "excluded", excluded.detail, at_});
  }
  void on(const events::HostQuarantined& quarantined) {
    QuarantineRow row;
    row.host = quarantined.host;
    row.reason = quarantined.reason;
    row.evidence = quarantined.evidence;
    row.since_ms = at_;
    // duration_ms comes from a log: a huge one saturates rather than overflows.
    int64_t duration = std::clamp<int64_t>(quarantined.duration_ms, 0, std::numeric_limits<int64_t>::max() - std::max<int64_t>(at_, 0));
    row.until_ms = at_ + duration;
    row.source = records_.run.id;
    records_.quarantines.push_back(std::move(row));
  }
  void on(const events::HostConnected& connected) {
    if (lost_hosts_.erase(connected.host) > 0) {
      records_.host_events.push_back({records_.run.id, connected.host, "rejoined", "agent connected again", at_});
    }
  }
  void on(const events::HostFacts& facts) {
    if (const json* gpus = json_member(facts.agent_facts, "gpus"); gpus && gpus->is_array() && !gpus->empty()) {
      gpu_hosts_.insert(facts.host);
    }
  }
  void on(const events::FailureDetected& detected) {
    FailureRow failure;
    failure.run_id = records_.run.id;
    GenerationSpan* open = current();
    failure.generation = gen_.value_or(open ? open->number : 0);
    failure.host = detected.cause.host;
    failure.rank = detected.cause.rank;
    failure.kind = events::to_string(detected.cause.kind);
    failure.detected_ms = at_;
    records_.failures.push_back(std::move(failure));
  }
  void on(const events::FailureRootCause& root) {
    for (auto failure = records_.failures.rbegin(); failure != records_.failures.rend(); ++failure) {
      if (failure->host == root.host) {
        failure->root_cause = true;
        break;
      }
    }
  }
  void on(const events::RecoveryCompleted&) {
    for (FailureRow& failure : records_.failures) {
      if (!failure.recover_ms) failure.recover_ms = at_ - failure.detected_ms;
    }
  }
  void on(const events::RunFinished& finished) {
    RunRow& run = records_.run;
    if (!finished.state.empty()) run.state = finished.state;
    run.exit_code = finished.exit_code;
    run.ended_ms = at_;
    finished_ = true;
    if (finished.root_cause) run.exit_reason = finished.root_cause->detail;
    if (GenerationSpan* open = current()) end_generation(*open, at_, "run " + run.state);
  }
  void on(const auto&) {}  // the rest says nothing the registry keeps

  RunRecords records_;
  std::vector<GenerationSpan> generations_;
  std::set<std::string> gpu_hosts_;
  std::set<std::string> lost_hosts_;  // for "rejoined"
  int64_t last_ms_ = 0;
  bool finished_ = false;
  int64_t at_ = 0;           // the event being read: when
  std::optional<int> gen_;   // and its generation stamp
};

RunRecords RecordsBuilder::finish(bool still_running, std::optional<int64_t> first_ms) {
  RunRow& run = records_.run;
  // A failure.detected alone (no failure.root_cause) in a run of one failure is its root cause.
  if (records_.failures.size() == 1) records_.failures.front().root_cause = true;
  if (run.submitted_ms == 0) run.submitted_ms = first_ms.value_or(0);
  // As `dtrain status` shows it: a run that never finished and whose supervisor is gone.
  if (!finished_ && !still_running && !is_terminal_state(run.state)) run.state = "supervisor gone";
  if (!generations_.empty() && !generations_.back().end_ms && !still_running) {
    end_generation(generations_.back(), last_ms_, "log ends without run.finished (supervisor gone)");
  }
  for (const GenerationSpan& generation : generations_) {
    int even_share = generation.hosts.empty() ? 0 : generation.world_size / static_cast<int>(generation.hosts.size());
    for (const std::string& host : generation.hosts) {
      AllocationRow allocation;
      allocation.run_id = run.id;
      allocation.generation = generation.number;
      allocation.host = host;
      auto started = generation.workers_started.find(host);
      allocation.units = started != generation.workers_started.end() ? started->second : std::max(even_share, 1);
      allocation.resource = gpu_hosts_.count(host) ? "gpu" : "slot";
      allocation.start_ms = generation.start_ms;
      auto ended = generation.host_ended.find(host);
      if (ended != generation.host_ended.end()) {
        allocation.end_ms = ended->second.first;
        allocation.end_reason = ended->second.second;
      } else {
        allocation.end_ms = generation.end_ms;
        allocation.end_reason = generation.end_reason;
      }
      records_.allocations.push_back(std::move(allocation));
    }
  }
  return std::move(records_);
}

}  // namespace

// Keep these two in step with RecordsBuilder above: the live writer keeps only what they let
// through, and a test compares its rows with a rebuild's.
bool records_read_event(const events::Event& event) {
  return std::visit(events::Overloaded{
      [](const events::RunSubmitted&) { return true; },     [](const events::RunState&) { return true; },
      [](const events::RunFinished&) { return true; },      [](const events::PlanGeneration&) { return true; },
      [](const events::GenerationSpawned&) { return true; }, [](const events::WorkerStarted&) { return true; },
      [](const events::HostLost&) { return true; },         [](const events::HostExcluded&) { return true; },
      [](const events::HostConnected&) { return true; },    [](const events::HostFacts&) { return true; },
      [](const events::HostQuarantined&) { return true; },
      [](const events::FailureDetected&) { return true; },  [](const events::FailureRootCause&) { return true; },
      [](const events::RecoveryCompleted&) { return true; }, [](const auto&) { return false; },
  }, event);
}

LoggedEvent fields_records_read(LoggedEvent logged) {
  std::visit(events::Overloaded{
      [](events::HostFacts& facts) {
        // Only whether the host has GPUs (it holds GPUs, not worker slots).
        const json* gpus = json_member(facts.agent_facts, "gpus");
        bool any = gpus && gpus->is_array() && !gpus->empty();
        facts.agent_facts = any ? json{{"gpus", json::array({true})}} : json::object();
      },
      [](events::RunFinished& finished) {
        finished.incidents.clear();  // the run's exit reason is its root cause's text
        if (finished.root_cause) finished.root_cause->traceback.reset();
      },
      [](auto&) {},
  }, logged.event);
  return logged;
}

RunRecords records_from_events(const std::string& run_id, const std::string& run_dir,
                               const std::vector<LoggedEvent>& events, const RunSnapshot& state, bool still_running) {
  RecordsBuilder builder(run_id, run_dir, state);
  for (const LoggedEvent& event : events) builder.add(event);
  return builder.finish(still_running, events.empty() ? std::nullopt : events.front().wall_ms());
}

namespace {

std::vector<std::string> run_directories(const std::string& root) {
  std::vector<std::string> names;
  DIR* directory = ::opendir(root.c_str());
  if (!directory) return names;
  while (dirent* entry = ::readdir(directory)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat info {};
    if (::stat((root + "/" + name + "/events.jsonl").c_str(), &info) == 0) names.push_back(name);
  }
  ::closedir(directory);
  std::sort(names.begin(), names.end());
  return names;
}

/// Who made the run when no event says: the owner of its directory.
std::string directory_owner(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return "";
  if (passwd* entry = ::getpwuid(info.st_uid)) return entry->pw_name;
  return std::to_string(info.st_uid);
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

Status insert_records(RegistryDb& db, const RunRecords& records) {
  if (Status inserted = db.insert_run(records.run); !inserted) return inserted;
  for (const AllocationRow& row : records.allocations) {
    if (Status inserted = db.insert_allocation(row); !inserted) return inserted;
  }
  for (const FailureRow& row : records.failures) {
    if (Status inserted = db.insert_failure(row); !inserted) return inserted;
  }
  for (const HostEventRow& row : records.host_events) {
    if (Status inserted = db.insert_host_event(row); !inserted) return inserted;
  }
  for (const QuarantineRow& row : records.quarantines) {
    if (Status inserted = insert_quarantine(db, row); !inserted) return inserted;
  }
  // After this run's failures are in: they may complete a count begun by earlier runs.
  if (Result<std::vector<QuarantineRow>> ruled = apply_cross_run_rule(db, records.run.id, records.quarantine_rule); !ruled) {
    return ruled.error();
  }
  return Status::success();
}

/// Ends an open transaction unless committed: every early return rolls back.
struct Transaction {
  RegistryDb& db;
  bool open = false;
  Status begin() {
    Status begun = db.begin();
    open = static_cast<bool>(begun);
    return begun;
  }
  Status commit() {
    Status committed = db.commit();
    if (committed) open = false;
    return committed;
  }
  ~Transaction() {
    if (open) (void)db.execute("ROLLBACK");
  }
};

/// A registry that opens and whose tables all read: it can be rebuilt in place.
Result<RegistryDb> open_healthy(const std::string& registry_file) {
  Result<RegistryDb> opened = RegistryDb::open(registry_file, false);
  if (!opened) return opened;
  for (const char* table : {"runs", "allocations", "failures", "host_events", "audit", "quarantine"}) {
    Statement probe(opened->handle(), std::string("SELECT count(*) FROM ") + table);
    if (!probe.ok() || probe.step() != SQLITE_ROW) return opened->error_of(std::string("cannot read table ") + table);
  }
  return opened;
}

/// A registry whose schema is newer than this dtrain's is not damaged: it must not be replaced.
bool newer_schema(const std::string& registry_file) {
  sqlite3* handle = nullptr;
  bool newer = false;
  if (sqlite3_open_v2(registry_file.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    Statement version(handle, "PRAGMA user_version");
    newer = version.ok() && version.step() == SQLITE_ROW && version.column_int(0) > kRegistrySchemaVersion;
  }
  sqlite3_close_v2(handle);
  return newer;
}

}  // namespace

std::string spec_hash_of(const std::string& spec_path) {
  // The run directory's own copy: a link, a FIFO (a rebuild would wait on it forever) or a file
  // past the spec limit is no spec dtrain wrote.
  Result<std::string> text = read_regular_file(spec_path, kMaxSpecCopyBytes, FollowLinks::kNo);
  if (!text) return "";
  return short_id(*text);  // FNV-1a: enough to tell specs apart, not a security hash
}

void complete_run_identity(RunRecords& records, const std::string& spec_path, const TenantOfSpec& tenant_of_spec) {
  if (records.run.user.empty()) records.run.user = directory_owner(records.run.run_dir);
  // Runs from before run.submitted named the tenant: the spec copy in the run directory does.
  if (records.run.tenant.empty() && tenant_of_spec) records.run.tenant = tenant_of_spec(spec_path);
  records.run.spec_hash = spec_hash_of(spec_path);
}

Status replace_run_records(RegistryDb& db, const RunRecords& records) {
  Transaction transaction{db};
  if (Status begun = transaction.begin(); !begun) return begun;
  for (const char* table : {"host_events", "failures", "allocations"}) {
    Statement remove(db.handle(), std::string("DELETE FROM ") + table + " WHERE run_id = ?1");
    remove.bind(1, records.run.id);
    if (!remove.ok() || remove.step() != SQLITE_DONE) return db.error_of(std::string("cannot update ") + table);
  }
  if (Status inserted = insert_records(db, records); !inserted) return inserted;
  return transaction.commit();
}

Result<RebuildSummary> rebuild_registry(const std::string& registry_file, const std::string& runs_root,
                                        const TenantOfSpec& tenant_of_spec, const QuarantineRuleOfSpec& rule_of_spec) {
  RebuildSummary summary;
  size_t slash = registry_file.rfind('/');
  if (slash != std::string::npos) {
    if (Status made = make_directories(registry_file.substr(0, slash)); !made) return made.error();
  }
  // A healthy registry is rebuilt in place, in one transaction: readers see the old rows or the
  // new ones, live writers wait on the lock (and re-write their run afterwards), the audit table
  // is never touched, and no file is swapped under anyone's open connection (a rename under a
  // WAL database would pair the new file with an old -wal). A damaged one is moved aside first.
  Result<RegistryDb> opened = open_healthy(registry_file);
  if (!opened && newer_schema(registry_file)) return opened.error();  // not damaged: made by a newer dtrain
  if (!opened && exists(registry_file)) {
    std::string damaged = registry_file + ".damaged";
    summary.warnings.push_back(opened.error().message + "; the old file is kept as " + damaged);
    if (::rename(registry_file.c_str(), damaged.c_str()) != 0) {
      return Error::infra(registry_file + ": cannot move the damaged registry aside: " + std::strerror(errno));
    }
    for (const char* suffix : {"-wal", "-shm"}) {
      (void)::rename((registry_file + suffix).c_str(), (damaged + suffix).c_str());
    }
    opened = RegistryDb::open(registry_file, true);
    if (!opened) return opened.error();
    // The audit table is in no run directory: keep what the damaged file still gives.
    Statement attach(opened->handle(), "ATTACH DATABASE ?1 AS previous");  // the path bound, not pasted
    attach.bind(1, damaged);
    Status copied = attach.step() == SQLITE_DONE ? Status::success() : opened->error_of("cannot attach " + damaged);
    attach.finish();
    if (copied) copied = opened->execute("INSERT INTO audit SELECT * FROM previous.audit");
    if (copied) {
      summary.audit_rows_kept = sqlite3_changes(opened->handle());
    } else {
      summary.warnings.push_back("the damaged registry's audit table could not be read; the new one starts empty (" +
                                 copied.error().message + ")");
    }
    // Releases and manual quarantines are in no run directory either (a damaged file from
    // before schema 2 has no such table: nothing to keep).
    (void)opened->execute("INSERT OR IGNORE INTO quarantine SELECT * FROM previous.quarantine");
    (void)opened->execute("DETACH DATABASE previous");
  } else if (!opened) {
    opened = RegistryDb::open(registry_file, true);
    if (!opened) return opened.error();
  } else {
    Statement count(opened->handle(), "SELECT count(*) FROM audit");
    if (count.ok() && count.step() == SQLITE_ROW) summary.audit_rows_kept = count.column_int(0);
  }
  RegistryDb& db = *opened;
  Transaction transaction{db};
  if (Status begun = transaction.begin(); !begun) return begun.error();
  for (const char* table : {"host_events", "failures", "allocations", "runs"}) {
    if (Status cleared = db.execute(std::string("DELETE FROM ") + table); !cleared) return cleared.error();
  }
  for (const std::string& name : run_directories(runs_root)) {
    std::string run_dir = runs_root + "/" + name;
    RunDirectory directory = RunDirectory::at(run_dir, name);
    int skipped = 0;
    Result<std::vector<LoggedEvent>> events = read_logged_events(directory.events_path(), [&](const EventLineError& line) {
      ++skipped;
      if (skipped <= 3) summary.warnings.push_back(line.message());
    });
    summary.skipped_lines += skipped;
    if (!events) {
      summary.warnings.push_back(name + ": not in the registry: " + events.error().message);
      continue;
    }
    Result<RunSnapshot> state = read_state_file(directory.state_path());
    RunSnapshot snapshot = state ? std::move(*state) : RunSnapshot{};
    bool still_running = state && !is_terminal_state(snapshot.state) && supervisor_alive(snapshot);
    RunRecords records = records_from_events(name, run_dir, *events, snapshot, still_running);
    complete_run_identity(records, directory.spec_path(), tenant_of_spec);
    if (rule_of_spec) records.quarantine_rule = rule_of_spec(directory.spec_path());
    if (Status inserted = insert_records(db, records); !inserted) return inserted.error();
    summary.runs += 1;
    summary.allocations += static_cast<int>(records.allocations.size());
  }
  if (Status committed = transaction.commit(); !committed) return committed.error();
  return summary;
}

}  // namespace dtrain::registry
