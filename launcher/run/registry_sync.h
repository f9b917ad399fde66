#pragma once
// RegistrySync: the supervisor's live writes to the run registry ($DTRAIN_HOME/registry.db).
// The run recorder hands it every event it records (observe); it keeps the few the registry is
// made from (the run, its generations and hosts, failures, host losses, exclusions and
// quarantines), and its
// thread re-derives the run's rows with the same records_from_events that `dtrain registry
// rebuild` uses and replaces them in one transaction. A write is always the complete picture so
// far: a missed or failed write is repaired by the next one, and a rebuild gives the same rows.
// What the log held before this supervisor (a resumed run's earlier generations, the submit) is
// read from events.jsonl once, up to where it ended when the sync started.
//
// Never on the training path: observe() reads the event into its struct and, for the few the
// registry keeps, copies it under a mutex. A registry that
// is locked (another writer, a rebuild), damaged or on a full disk costs this thread a busy
// timeout and a warning in supervisor.log; the run goes on and its directory stays the record.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_rebuild.h"
#include "launcher/runlog/event_log.h"

namespace dtrain::run {

class RegistrySync {
 public:
  using Warn = std::function<void(const std::string&)>;

  /// `tenant_of_spec`: for a run whose run.submitted does not name its tenant (made by an older
  /// dtrain, then resumed). `warn` is called on the sync thread. `quarantine_rule`: the spec's
  /// health.quarantine, for the registry's cross-run rule.
  RegistrySync(std::string registry_file, std::string run_id, std::string run_dir, std::string events_path,
               std::string spec_path, registry::TenantOfSpec tenant_of_spec, Warn warn,
               registry::QuarantineRule quarantine_rule = {});
  ~RegistrySync();  ///< writes what it has (once), then stops
  RegistrySync(const RegistrySync&) = delete;
  RegistrySync& operator=(const RegistrySync&) = delete;

  /// Called with every event the run records (before it is written), stamped `wall_ms` as the
  /// log stamps it: a generation's start, a failure, a host loss or the run's end makes the
  /// thread write soon, not at its next quiet interval. Only takes a mutex when the event matters.
  void observe(LoggedEvent event, int64_t wall_ms);

  /// Once run.finished was observed: waits until the final picture is written (or failed). The
  /// supervisor calls this before it exits, so that `dtrain usage` right after sees the end.
  void wait_if_finished();

  /// Writes at most this often while the run is quiet (a generation start, a failure or the end
  /// is written at once).
  static constexpr int64_t kQuietWriteIntervalMs = 2000;
  /// What a run still holds is written as held until the write's time, and rewritten this often
  /// while nothing else changes: a supervisor that dies (kill -9, a lost login node) leaves its
  /// allocations ending at most this long after its last sign of life, not open, where `dtrain
  /// usage` and the quota check would count them up to every later "now".
  static constexpr int64_t kHeldRewriteIntervalMs = 30000;
  /// A write rewrites the run's rows from every event it keeps: at 16,384 hosts, a second of
  /// this thread's time. Writes other than the last are spaced by at least this many times the
  /// previous write's (wall) time, so the registry never takes more than about 1/21 of a core.
  static constexpr int64_t kWriteCostMultiple = 20;

 private:
  void loop();
  /// Replaces the run's rows; false (and a warning, at most one a minute) when it cannot.
  bool write(const std::vector<LoggedEvent>& events, bool finished);
  /// The events the registry keeps from what events.jsonl held before the sync started.
  std::vector<LoggedEvent> read_history() const;

  const std::string registry_file_;
  const std::string run_id_;
  const std::string run_dir_;
  const std::string events_path_;
  const std::string spec_path_;
  const int64_t history_bytes_;  ///< events.jsonl's size when the sync started: the log before it
  registry::TenantOfSpec tenant_of_spec_;
  Warn warn_;
  const registry::QuarantineRule quarantine_rule_;
  std::optional<registry::RegistryDb> db_;  ///< the sync thread's; reopened after a failure
  int64_t last_warning_ms_ = -1;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable written_;
  bool urgent_ = false;
  std::vector<LoggedEvent> observed_;  ///< kept events recorded since the thread last took them
  bool finished_seen_ = false;   ///< run.finished recorded (observe)
  bool final_requested_ = false; ///< wait_if_finished() waits for the write after it
  bool final_written_ = false;
  bool stopping_ = false;
  std::thread thread_;  ///< last: starts after every member above exists
};

}  // namespace dtrain::run
