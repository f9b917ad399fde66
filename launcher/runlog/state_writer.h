#pragma once
// StateWriter: state.json written off the supervisor's event loop. Serialising a snapshot of
// thousands of ranks and its two fsyncs (on $DTRAIN_HOME, often NFS) take long enough to delay
// pings and beats; the loop only builds the JSON and hands it over. Latest wins: a snapshot not
// yet written when a newer one arrives is dropped, so a slow file system costs freshness, never
// memory or loop time.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain {

/// One rank's entry in state.json's "ranks" (schema: run_state.h), as plain values. The loop
/// copies these and the writer thread turns them into text: built as nlohmann objects on the
/// loop, 16,384 ranks took 300-600 ms per snapshot (scripts/bench/sim.py at 2,048 hosts).
struct StateRankRow {
  int rank = 0;
  std::string host;
  int local_rank = 0, dp = 0, pp = 0, tp = 0;
  int64_t pid = 0;             ///< 0: not started (null)
  const char* state = "";      ///< a static name (supervisor::to_string)
  int64_t step = -1;           ///< < 0: no step yet (null)
  int64_t last_beat_ms = 0;    ///< 0: never beat (null)
  std::optional<double> loss;
  std::optional<double> step_ms;  ///< absent when unknown
  std::optional<std::string> exit_signal;  ///< "SIGKILL"
  std::optional<int> exit_code;
};

/// The "ranks" array as JSON text, one rank per line (indented for state.json's top level).
/// Non-finite numbers become null, as nlohmann writes them.
std::string rank_rows_json(const std::vector<StateRankRow>& rows);

/// state.json's text: `head` (an object) with `"ranks"` added from `rows`.
std::string state_json_text(const nlohmann::json& head, const std::vector<StateRankRow>& rows);

class StateWriter {
 public:
  /// Writes to `state_path` (RunDirectory::state_path()) with write_state()'s format.
  explicit StateWriter(std::string state_path);
  ~StateWriter();  ///< writes what is pending, then stops
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  /// Queues `state` (an object), replacing a queued one that was not written yet.
  void submit(nlohmann::json state);
  /// The same, with the ranks as rows (serialised on the writer thread).
  void submit(nlohmann::json head, std::vector<StateRankRow> ranks);
  /// Waits until everything submitted so far is on disk; the last write's outcome.
  Status flush();
  /// How long turning the last snapshot's rows into text took (CPU on this thread; the write
  /// and its fsyncs not included), for the caller's pacing.
  int64_t last_text_ms() const { return last_text_ms_.load(); }

 private:
  void run();

  std::string path_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Snapshot {
    nlohmann::json head;
    std::optional<std::vector<StateRankRow>> ranks;
  };
  std::optional<Snapshot> pending_;
  bool writing_ = false;
  bool stopping_ = false;
  Status last_{};
  std::atomic<int64_t> last_text_ms_{0};
  std::thread thread_;
};

}  // namespace dtrain
