#pragma once
// StateWriter: state.json written off the supervisor's event loop. Serialising a snapshot of
// thousands of ranks and its two fsyncs (on $DTRAIN_HOME, often NFS) take long enough to delay
// pings and beats; the loop only fills a RunSnapshot (plain values) and hands it over. Latest
// wins: a snapshot not yet written when a newer one arrives is dropped, so a slow file system
// costs freshness, never memory or loop time.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "launcher/base/result.h"
#include "launcher/runlog/run_snapshot.h"

namespace dtrain {

class StateWriter {
 public:
  /// Writes to `state_path` (RunDirectory::state_path()) as write_state() does.
  explicit StateWriter(std::string state_path);
  ~StateWriter();  ///< writes what is pending, then stops
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  /// Queues `snapshot`, replacing a queued one that was not written yet; it is turned into text
  /// (RunSnapshot::text()) on the writer thread.
  void submit(RunSnapshot snapshot);
  /// Waits until everything submitted so far is on disk; the last write's outcome.
  Status flush();
  /// How long turning the last snapshot into text took (CPU on this thread; the write and its
  /// fsyncs not included), for the caller's pacing.
  int64_t last_text_ms() const { return last_text_ms_.load(); }

 private:
  void run();

  std::string path_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<RunSnapshot> pending_;
  bool writing_ = false;
  bool stopping_ = false;
  Status last_{};
  std::atomic<int64_t> last_text_ms_{0};
  std::thread thread_;
};

}  // namespace dtrain
