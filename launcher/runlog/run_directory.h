#pragma once
// Where a run lives on disk: $DTRAIN_HOME/runs/<run-id>/ and the short runtime directory for its
// sockets. The supervisor creates it; `dtrain status/logs/stop/report` open it by id or prefix.
//
// Layout (docs/architecture.md §3):
//   spec.yaml           the spec as resolved
//   events.jsonl        append-only event log (event_log.h)
//   supervisor.log      human text (spdlog)
//   ranks/<rank>.log    stdout+stderr of one rank, with generation markers (rank_logs.h)
//   hosts/<host>.json   host facts
//   plan-<gen>.json     the rank plan of generation <gen>
//   state.json          atomic snapshot for `dtrain status` (run_state.h)
//   ctl.sock            symlink to <runtime_dir>/ctl.sock, present while the supervisor lives
//   lock                flock(2)ed by the supervisor for its whole life: "<pid> <host>" (run_lock.h)

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/base/runtime_directory.h"

namespace dtrain {

/// $DTRAIN_HOME if set and non-empty, else ${XDG_STATE_HOME:-$HOME/.local/state}/dtrain.
std::string dtrain_home();

/// dtrain_home() + "/runs".
std::string runs_root();

/// "<name>-YYYYMMDD-HHMMSS-<4 hex>", time in UTC so ids sort the same on every host. The name is
/// sanitised to [A-Za-z0-9_.-] (others become '-', leading '.'/'-' dropped), cut to 40
/// characters, "job" when nothing is left. The 4 hex digits are random.
std::string make_run_id(std::string_view job_name, int64_t wall_ms);

/// 8 lowercase hex digits (FNV-1a of the id): names the runtime directory, which must stay
/// short because a unix socket path must fit in 107 bytes. Stable across processes and hosts.
std::string short_id(std::string_view run_id);

/// One line of `dtrain status`: what list_runs() could learn from a run's state.json.
struct RunSummary {
  std::string id;
  std::string path;
  std::string name;
  /// state.json "state", "supervisor gone" when non-terminal and the supervisor no longer
  /// runs, "unknown" when state.json is missing or unreadable.
  std::string display_state;
  bool supervisor_alive = false;
  int host_count = 0;
  int world_size = 0;
  /// submitted_at_ms; for a run without a readable state.json, its directory's mtime.
  int64_t started_at_ms = 0;
  std::optional<int64_t> finished_at_ms;
  std::optional<int> exit_code;
  /// Why display_state is "unknown"; empty otherwise.
  std::string problem;
};

/// Largest hosts/<host>.json read back: an agent's facts (CPUs, memory, GPUs) are a few kB.
inline constexpr size_t kMaxHostFactsBytes = size_t{1} << 20;

class RunDirectory {
 public:
  /// Creates runs_root()/<run_id>/ with ranks/ and hosts/ (and any missing parents), all mode
  /// 0700. Fails if the run directory already exists or `run_id` is not a plain name.
  static Result<RunDirectory> create(const std::string& run_id);

  /// Opens an existing run by exact id, else by a prefix that matches exactly one run. Errors
  /// (user): no match ("no run 'x' in <root>; `dtrain status` lists runs"), or an ambiguous
  /// prefix (lists the candidates).
  static Result<RunDirectory> open(std::string_view id_or_unique_prefix);

  /// Every run under runs_root(), oldest first. A missing runs_root() is an empty list; a run
  /// whose state.json is broken is listed with display_state "unknown".
  static Result<std::vector<RunSummary>> list_runs();

  /// A handle on `path` without checking anything; for tests and tools given a directory.
  static RunDirectory at(std::string path, std::string run_id);

  const std::string& path() const { return path_; }
  const std::string& id() const { return id_; }

  std::string spec_path() const { return path_ + "/spec.yaml"; }
  std::string events_path() const { return path_ + "/events.jsonl"; }
  std::string supervisor_log_path() const { return path_ + "/supervisor.log"; }
  std::string state_path() const { return path_ + "/state.json"; }
  std::string ranks_dir() const { return path_ + "/ranks"; }
  std::string rank_log_path(int rank) const { return ranks_dir() + "/" + std::to_string(rank) + ".log"; }
  std::string hosts_dir() const { return path_ + "/hosts"; }
  /// hosts/<host>.json; characters outside [A-Za-z0-9_.-] in `host` become '_'.
  std::string host_facts_path(std::string_view host) const;
  /// The text of hosts/<host>.json (resume, dtrain hosts): read_regular_file without following a
  /// link and at most kMaxHostFactsBytes, so a FIFO or a planted link there is refused, never
  /// waited on or followed.
  Result<std::string> read_host_facts(std::string_view host) const;
  std::string plan_path(int generation) const { return path_ + "/plan-" + std::to_string(generation) + ".json"; }
  /// The symlink in the run directory; its target is runtime_dir() + "/ctl.sock".
  std::string ctl_link_path() const { return path_ + "/ctl.sock"; }
  /// The runtime directory asked for: "<default_runtime_base()>/<short_id>", i.e.
  /// /tmp/dtrain-<uid>/<short_id>, short enough for socket paths. Not created here.
  std::string runtime_dir() const;

  /// open_runtime_directory(runtime_dir()) (base/runtime_directory.h): makes it mode 0700 and
  /// checks every component; if another user made /tmp/dtrain-<uid> (or it is a link, or open
  /// to others), a fresh private directory for this run instead, with `refused` saying why.
  /// The caller says so once and sends the path in use to every agent.
  Result<RuntimeDirectoryChoice> create_runtime_dir() const;

  /// Points ctl.sock at `socket_path` (replacing a stale link); call once the socket listens.
  Status link_control_socket(const std::string& socket_path) const;

  /// Removes the ctl.sock link (a missing one is fine); call when the supervisor stops serving.
  void unlink_control_socket() const;

  /// The ranks that have a ranks/<rank>.log, ascending.
  std::vector<int> ranks_with_logs() const;

 private:
  RunDirectory(std::string path, std::string id) : path_(std::move(path)), id_(std::move(id)) {}
  std::string path_;
  std::string id_;
};

/// mkdir -p with `mode` for every directory it creates (existing ones are left as they are).
Status make_directories(const std::string& path, int mode = 0700);

}  // namespace dtrain
