#pragma once
// What every injection starts from: the run's current generation (its workers, by host) and
// the wait until that generation trains steadily (or has reached --at-step).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/drill/fault.h"
#include "launcher/drill/live_run.h"

namespace dtrain::drill {

using Deadline = std::chrono::steady_clock::time_point;

/// Progress lines for the operator ("injected kill-rank:1 ..."); may be empty.
using Say = std::function<void(const std::string&)>;

/// The current generation's workers, from its worker.started events (authoritative: state.json
/// is a snapshot written at most twice a second).
struct GenerationView {
  int generation = -1;
  std::vector<int> pids;
  std::map<std::string, std::vector<int>> pids_by_host;
  /// The pid of `rank` in this generation, if it started.
  std::optional<int> rank_pid(int rank, const std::vector<LoggedEvent>& events) const;
};

GenerationView view_of(const LiveRun& run);

/// The run's current generation trains steadily, at step `step` (lowest over the ranks).
struct Ready {
  GenerationView view;
  int64_t step = 0;
};

/// Steady: the run says "running", every rank of the current generation runs and has made
/// progress since the drill first saw it (or reached fault.at_step). corrupt-checkpoint also
/// waits for a fresh commit and two complete checkpoints. Errors (infra): the run ended, the
/// deadline passed, a cancel was requested.
Result<Ready> wait_until_ready(LiveRun& run, const Fault& fault, Deadline deadline, const Say& say);

/// Asks every drill wait to give up soon (the CLI calls it from SIGINT/SIGTERM); async-signal-safe.
void request_cancel();
bool cancel_requested();

}  // namespace dtrain::drill
