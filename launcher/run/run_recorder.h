#pragma once
// RunRecorder: where the driver's record of a run goes — events.jsonl, supervisor.log,
// ranks/<r>.log, metrics.jsonl, plans, samples, state.json and the console. The driver hands it
// whole records; nothing here runs on the event loop's time: files are written by a
// RunLogWriter thread (in order), state.json by a StateWriter (latest wins), supervisor.log by
// spdlog's async logger, and the console on the writer thread (a terminal held by Ctrl-S or a
// full stderr pipe must not stop the loop either). Notable events (run.state,
// failure.detected) also become console lines: the console observes the one event stream.

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/run/console.h"
#include "launcher/run/registry_sync.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/rank_logs.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_log_writer.h"
#include "launcher/runlog/state_writer.h"

namespace dtrain::run {

class RunRecorder {
 public:
  /// `run` must outlive the recorder. `before_write`: see RunLogWriter (tests stall it).
  /// `rank_log_max_bytes`: the spec's logs.max_bytes (RankLogs rotates at it; 0: never).
  RunRecorder(const RunDirectory& run, EventLog events, Console console, const Clock& clock,
              RunLogWriter::BeforeWrite before_write = {}, uint64_t rank_log_max_bytes = 0);
  ~RunRecorder();  ///< writes what is queued

  /// Opens supervisor.log (0600) and starts the run registry's live writes (RegistrySync), whose
  /// cross-run quarantine rule is `quarantine_rule` (the spec's health.quarantine). Call once
  /// before anything is recorded.
  Status open(registry::QuarantineRule quarantine_rule = {});

  /// Appends `event` (an object with "ev") to events.jsonl, stamped now, and to supervisor.log.
  void record(nlohmann::json event);
  /// Writes `text` to `path` (its directory made 0700 if missing) atomically, then records `event` with "path" and "bytes" — or with
  /// "error" when the write failed.
  void write_file_then_record(std::string path, std::string text, nlohmann::json event);
  /// Writes `text` to `path` atomically; a failure goes to supervisor.log.
  void write_file(std::string path, std::string text, Durability durability = Durability::kSynced,
                  int mode = 0600);
  /// A line of a rank's output (`stream` "stdout" or "stderr", the line without its newline):
  /// into its rank log and, when the console's echo chooses the rank, onto the terminal at the
  /// same moment. Dropped first, and counted in a runlog.dropped event, while the writer is
  /// behind (RunLogWriter's bounds).
  void rank_output(int rank, int generation, std::string_view stream, std::string line);
  /// One metrics.jsonl line; the file becomes metrics.1.jsonl at `kMetricsMaxBytes`.
  void metrics(nlohmann::json line);
  /// state.json: the newest snapshot wins.
  void state(RunSnapshot snapshot) { state_writer_.submit(std::move(snapshot)); }
  int64_t last_state_text_ms() const { return state_writer_.last_text_ms(); }

  void console_line(std::string text);
  void console_status(ConsoleStatus status);
  Console::Mode console_mode() const { return console_mode_; }
  /// Set at construction and never changed: safe to read from the loop.
  const WorkerEcho& worker_echo() const { return worker_echo_; }

  /// supervisor.log (spdlog async: the caller only formats).
  spdlog::logger& log() { return *log_; }

  /// Waits until everything recorded so far is written (state.json included; the run registry
  /// too once run.finished was recorded — bounded by its busy timeout). The console is
  /// then idle: the caller may print to stdout/stderr directly (the end-of-run summary).
  void flush();
  /// Ends the live status line (call after flush(), before printing a summary).
  void finish_console() { console_.finish(); }

  static constexpr uint64_t kMetricsMaxBytes = 64ull << 20;

 private:
  /// Writes the one runlog.dropped event of a stall (on the writer thread).
  void report_drops(const RunLogWriter::DropSummary& dropped);

  const RunDirectory& run_;
  const Clock& clock_;
  EventLog events_;        ///< used on the writer thread only
  RankLogs rank_logs_;     ///< used on the writer thread only
  Console console_;        ///< used on the writer thread only (and after flush())
  Console::Mode console_mode_;
  WorkerEcho worker_echo_;
  std::shared_ptr<spdlog::logger> log_;
  StateWriter state_writer_;
  /// Follows events.jsonl. Destroyed after the writer (members go in reverse order), so its last
  /// pass reads every event the writer wrote.
  std::unique_ptr<RegistrySync> registry_;
  RunLogWriter writer_;    ///< last: its thread stops (draining the queue) before the rest goes
};

}  // namespace dtrain::run
