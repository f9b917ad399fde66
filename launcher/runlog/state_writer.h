#pragma once
// StateWriter: state.json written off the supervisor's event loop. Serialising a snapshot of
// thousands of ranks and its two fsyncs (on $DTRAIN_HOME, often NFS) take long enough to delay
// pings and beats; the loop only builds the JSON and hands it over. Latest wins: a snapshot not
// yet written when a newer one arrives is dropped, so a slow file system costs freshness, never
// memory or loop time.

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain {

class StateWriter {
 public:
  /// Writes to `state_path` (RunDirectory::state_path()) with write_state()'s format.
  explicit StateWriter(std::string state_path);
  ~StateWriter();  ///< writes what is pending, then stops
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  /// Queues `state` (an object), replacing a queued one that was not written yet.
  void submit(nlohmann::json state);
  /// Waits until everything submitted so far is on disk; the last write's outcome.
  Status flush();

 private:
  void run();

  std::string path_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<nlohmann::json> pending_;
  bool writing_ = false;
  bool stopping_ = false;
  Status last_{};
  std::thread thread_;
};

}  // namespace dtrain
