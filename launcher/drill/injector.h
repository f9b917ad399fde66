#pragma once
// The faults themselves, done from outside the job the way the real failure would come: a
// signal to a worker's pid, a damaged byte in a checkpoint shard on disk.

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/base/result.h"

namespace dtrain::drill {

class LiveRun;

/// `signal` to the process that `pid` (read from `run`'s log) names now, through
/// dtrain::send_signal; the error names the pid, the signal and why (already gone). pid <= 1 is
/// an internal bug: never signalled, recorded in the run's log as signal.refused.
Status send_signal(const LiveRun& run, int pid, int signal);

/// Steps of `checkpoint_dir`'s step-<N> directories that hold a MANIFEST.json, newest first.
std::vector<int64_t> complete_checkpoint_steps(const std::string& checkpoint_dir);

struct CorruptedCheckpoint {
  int64_t step = 0;           ///< the step damaged (the newest complete one)
  int64_t previous_step = 0;  ///< the newest complete step before it: where a resume must go
  std::string file;           ///< the shard damaged
  int64_t offset = 0;         ///< the byte flipped
};

/// Flips one payload byte of one shard of the newest complete checkpoint, in place (fsynced),
/// leaving its manifest alone: only the shard's checksum can tell. Needs two complete
/// checkpoints, so that a good one remains to resume from; errors (infra) say what is missing.
Result<CorruptedCheckpoint> corrupt_newest_checkpoint(const std::string& checkpoint_dir);

/// The same for every complete step from `oldest` up (at least the newest one), newest first.
/// The supervisor names the newest step it has heard of, which can lag the disk by a heartbeat
/// or more (commits travel with the agent's beat frames): damaging only the newest on disk
/// would then let the run resume from an intact step it never doubted, and the drill would test
/// nothing. Needs a complete step older than `oldest` to remain.
Result<std::vector<CorruptedCheckpoint>> corrupt_checkpoints_from(const std::string& checkpoint_dir,
                                                                  int64_t oldest);

}  // namespace dtrain::drill
