#pragma once
// Hang evidence for PyTorch NCCL jobs. Every worker gets NCCL's warnings and PyTorch's flight
// recorder switched on through its environment (a ring buffer of the last collectives, dumped on
// a watchdog timeout or when its debug-info pipe is written), with the dump and the pipe in the
// agent's own files directory. Before a hung generation is killed the supervisor sends `dump`
// (messages.h): the agent writes to each rank's pipe, waits a bounded time for the dump files and
// ships them; the supervisor keeps them next to the stack samples. Internal to the agent module.

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "launcher/proto/agent_messages.h"

#include "launcher/base/duration.h"

namespace dtrain::agent {

/// Ring buffer entries the flight recorder keeps (PyTorch's docs suggest ~2000).
inline constexpr const char* kFlightRecorderEntries = "2000";

/// Adds, unless `env` or the agent's own environment already sets it (the user's value wins):
/// NCCL_DEBUG=WARN, TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1,
/// and `dump_prefix` as TORCH_NCCL_DEBUG_INFO_TEMP_FILE, TORCH_FR_DUMP_TEMP_FILE,
/// TORCH_NCCL_DEBUG_INFO_PIPE_FILE and TORCH_FR_DEBUG_INFO_PIPE_FILE (PyTorch appends the rank:
/// the dump is <prefix><rank>, the fifo it creates <prefix><rank>.pipe).
void add_hang_evidence_env(std::map<std::string, std::string>& env, const std::string& dump_prefix);

/// Where a worker's flight recorder dumps and listens, as prefixes PyTorch appends the rank to.
/// Empty: nothing names one, and nothing is looked for (never PyTorch's default
/// /tmp/nccl_trace_rank_<r>, where any local user can plant a file).
struct DumpPaths {
  std::string dump_prefix;
  std::string pipe_prefix;
};

/// The paths the agent gave a worker: the TORCH_FR_* (else TORCH_NCCL_*) variables of
/// `assigned_env` (what the agent put in its environment at spawn, or sent with the assign that
/// made a warm standby this rank), else of the agent's own environment, which the worker
/// inherited. Not /proc/<pid>/environ: a promoted standby's shows the environment it started
/// with, before it was a rank, and anything it shows is the worker's to make up.
DumpPaths assigned_dump_paths(const std::map<std::string, std::string>& assigned_env);

struct DumpTarget {
  int gen = -1;
  int rank = -1;
  pid_t pid = 0;
  DumpPaths paths;
};

/// Asks every target whose debug-info pipe exists for a flight-recorder dump, waits up to
/// `timeout` for the dump files (all targets together), and returns one `dump` reply frame
/// (messages.h) per target that had a pipe or a dump file; a target without either, or without
/// paths, costs no wait and gets no reply. A user's own TORCH_* settings are honoured
/// (assigned_dump_paths). A dump of at most `max_bytes` travels in the frame (base64); a dump
/// inside `owned_directory` is removed once read, one elsewhere is left alone.
std::vector<proto::FlightRecorderDump> collect_flight_recorder_dumps(const std::vector<DumpTarget>& targets,
                                                                     Millis timeout, size_t max_bytes,
                                                                     const std::string& owned_directory);

}  // namespace dtrain::agent
