#pragma once
// A run as the drill sees it: its run directory, its events as they are appended, its
// state.json, and a way to add the drill's own events to its log.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_snapshot.h"

namespace dtrain::drill {

class LiveRun {
 public:
  /// Opens a run by id or unique prefix. Errors (user): no such run, or one that has ended or
  /// whose supervisor is gone ("run X has ended (succeeded); drill a running run, or use
  /// --spec"): a drill needs someone to recover. A run submitted a moment ago (no state.json
  /// yet) is waited for, up to 10 s.
  static Result<LiveRun> open(std::string_view id_or_prefix);

  const RunDirectory& directory() const { return directory_; }
  const std::string& id() const { return directory_.id(); }

  /// Reads the events appended since the last call into events().
  Status poll();
  /// Every event read so far, oldest first.
  const std::vector<LoggedEvent>& events() const { return events_; }

  /// state.json now.
  Result<RunSnapshot> state() const;

  /// Appends one event (object with "ev") to the run's events.jsonl as a single O_APPEND
  /// write of one line, so it interleaves safely with the supervisor's own appends. The run's
  /// log is never truncated or rewritten here.
  Status append(const nlohmann::json& event) const;

  /// The newest generation.spawned's checkpoint_dir; empty before the first spawn.
  std::string checkpoint_dir() const;
  /// The newest plan.generation's "gen"; -1 before the first.
  int generation() const;

 private:
  explicit LiveRun(RunDirectory directory)
      : directory_(std::move(directory)), follower_(directory_.events_path()) {}
  RunDirectory directory_;
  EventFollower follower_;
  std::vector<LoggedEvent> events_;
};

/// Why `state` is not a run a drill can use ("has ended (succeeded, exit 0)", "has no
/// supervisor any more (pid 123 is gone)"), or "" when it is live.
std::string not_live_reason(const RunSnapshot& state);

/// The run's recorded state (recorded_state, run_state.h), "unknown" when state.json could not
/// be read.
std::string recorded_state(const Result<RunSnapshot>& state);

}  // namespace dtrain::drill
