#pragma once
// checkpoint.before_walltime: when the Slurm job's time limit is that near, the driver asks every
// worker for a checkpoint. The job's time left (`squeue -h -j JOB -o %L`) is looked up by a
// child process that the event loop pumps at its tick instead of waiting for it: squeue asks
// slurmctld, which can take seconds when it is busy, and the loop must keep pinging agents (they
// fence themselves after heartbeat.timeout of silence) meanwhile.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <spdlog/logger.h>

#include "launcher/base/child_process.h"
#include "launcher/base/duration.h"

namespace dtrain::run {

class SlurmTimeLeftLookup {
 public:
  /// The job's time left in ms, or why it is not known (the text goes into a warning).
  using Outcome = std::variant<int64_t, std::string>;

  /// Starts squeue for `job`; past `timeout` (real time) the child is killed and the lookup fails.
  /// A squeue that cannot be started fails at once (done() then holds why).
  SlurmTimeLeftLookup(const std::string& job, Millis timeout);

  /// Reads what squeue wrote so far, never blocking; the outcome once it exited (or timed out).
  /// Call as often as convenient (the driver: every tick); after the outcome, returns it again.
  const std::optional<Outcome>& poll();
  const std::string& job() const { return job_; }

 private:
  void finish();

  std::string job_;
  std::optional<PipedChild> child_;
  std::chrono::steady_clock::time_point deadline_;
  Millis timeout_;
  std::string out_;
  std::optional<Outcome> outcome_;
};

/// The moment checkpoint.before_walltime is due: the time left is looked up once, from the
/// first tick (so that a limit changed with scontrol before the start is the one used).
class SlurmTimeLimitWatch {
 public:
  /// `before`: checkpoint.before_walltime; 0 turns the watch off.
  explicit SlurmTimeLimitWatch(Millis before) : before_(before) {}

  /// At each tick (monotonic `now_ms`): true once, when the checkpoint is due. What it learns
  /// (the time left, or why it is unknown) goes to `log`.
  bool due(int64_t now_ms, spdlog::logger& log);

 private:
  Millis before_;
  bool done_ = false;  ///< due, or never will be
  std::optional<SlurmTimeLeftLookup> lookup_;
  int64_t lookup_started_ms_ = 0;
  std::optional<int64_t> deadline_ms_;  ///< monotonic
};

}  // namespace dtrain::run
