#pragma once
// The agent's checks of its own host (issue 29, health gates): what proto::HealthRequest asks
// for, each answered as proto::HealthCheck(s) with a verdict and a message that says what was
// found and the fix. Internal to the agent module; the runner (health_runner.h) runs them off
// the agent's loop, `dtrain agent --health-probe` once.
//
// Every check reads the world through a root or a parameter, so tests give it fake trees:
//   DTRAIN_SYSFS_ROOT  a directory standing for / when reading /sys (default "", the real one):
//                      $ROOT/sys/class/infiniband/*/ports/*/{state,counters/link_downed} and
//                      $ROOT/sys/class/net/<interface>/operstate.
//   DTRAIN_NVML_LIBRARY  the NVML to open (nvml_library.h; tests use tests/fakes/fake_nvml.cpp).
//
// Check names: "gpu N", "gpu N memory", "infiniband <dev>/<port>", "master interface",
// "checkpoint dir", "site command", "site diagnose". A check that has nothing to look at (no
// NVML, no /sys/class/infiniband, no checkpoint directory asked for) is simply absent.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "launcher/agent/nvml_library.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/host_health.h"

namespace dtrain::agent {

/// The variable that points the sysfs reads at a fake tree.
inline constexpr const char* kSysfsRootVariable = "DTRAIN_SYSFS_ROOT";
/// The file the checkpoint directory's probe writes, fsyncs and removes. Fixed, so that a test
/// can make the write hang with a FIFO of this name.
inline constexpr const char* kCheckpointProbeName = ".dtrain-health-probe";

/// $DTRAIN_SYSFS_ROOT, or "" (the real /sys).
std::string sysfs_root_from_environment();

/// The Xids NVIDIA's Xid catalogue says need the GPU reset or serviced (ECC/row remap, fallen
/// off the bus, NVLink, GSP): a host that reported one is kept out. Others are warnings.
bool is_fatal_xid(int64_t xid);

/// GPU health from NVML readings and the Xids since the last check: one "gpu N" check per GPU
/// (and per GPU an Xid names that is not in `gpus`). Pending retirement or remap, a failed
/// remap, uncorrected ECC errors and fatal Xids fail; hardware throttling and other Xids warn.
std::vector<proto::HealthCheck> check_gpu_health(const std::vector<GpuHealthReadings>& gpus,
                                                 const std::vector<proto::XidEvent>& xids);

/// InfiniBand ports under `sysfs_root`: one "infiniband <dev>/<port>" check each; none when
/// there is no sysfs_root/sys/class/infiniband. A port whose state is not "4: ACTIVE" fails
/// (unless its phys_state says it was disabled on purpose);
/// link_downed above the value in `link_downed_seen` (the previous check's; updated here)
/// warns, and fails when the port is not active either.
std::vector<proto::HealthCheck> check_infiniband(const std::string& sysfs_root,
                                                 std::map<std::string, int64_t>& link_downed_seen);

/// "master interface": the local interface whose address routes to `master_addr` must be up
/// (operstate up, or unknown as loopback and some virtual NICs say). A master that does not
/// resolve fails.
proto::HealthCheck check_master_interface(const std::string& sysfs_root, const std::string& master_addr);

/// "checkpoint dir": created when missing, a small file written, fsynced and removed within
/// `write_timeout_ms` (on a thread of its own: a hung filesystem costs the check its limit, not
/// the agent), and at least `min_free_mb` free.
proto::HealthCheck check_checkpoint_dir(const std::string& directory, int64_t write_timeout_ms, int64_t min_free_mb);

/// How a site command ended (run_site_command).
struct SiteCommandResult {
  enum class Ending { exited, signalled, timed_out, stopped, not_started };
  Ending ending = Ending::not_started;
  int exit_code = -1;   ///< when exited
  int signal = 0;       ///< when signalled
  std::string output;   ///< stdout then stderr, at most kMaxSiteOutputBytes
  std::string error;    ///< when not_started
};
inline constexpr size_t kMaxSiteOutputBytes = 64 << 10;

/// `sh -c command` in a process group of its own, stdin at EOF, killed (its whole group) at
/// `timeout_ms` or as soon as `stop_fd` (when >= 0) polls readable.
SiteCommandResult run_site_command(const std::string& command, int64_t timeout_ms, int stop_fd = -1);

/// True when `bytes` reads as text: valid UTF-8 without NUL or control bytes other than
/// tab, newline and carriage return.
bool looks_like_text(const std::string& bytes);

/// "site command" from its result: exit 0 ok; exit 1 fail with its output as the reason; any
/// other exit, a signal, a timeout or output that is not text warn (fail open).
proto::HealthCheck judge_site_command(const SiteCommandResult& result, int64_t timeout_ms);
/// "site diagnose": exit 0 ok; another exit fails with its output; a timeout or signal warns.
proto::HealthCheck judge_site_diagnose(const SiteCommandResult& result, int64_t timeout_ms);

/// What the leftover-memory check reads; a seam so that tests drive the waiting.
struct LeftoverMemorySource {
  int gpu_count = 0;
  /// The compute processes of one GPU; nullopt when NVML cannot list them.
  std::function<std::optional<std::vector<GpuProcess>>(int gpu)> processes;
  /// This run's processes (the agent and its workers' trees): their memory is not leftover.
  std::function<std::set<int64_t>()> own_pids;
  /// Waits this long before the next look (a test frees the memory here); false: stop waiting
  /// now (the agent is exiting) and judge what the last look found.
  std::function<bool(int64_t ms)> pause;
  /// Monotonic ms.
  std::function<int64_t()> now_ms;
};

/// "gpu N memory" per GPU: the memory of processes that are not this run's, above
/// `limit_mb`, looked at again until `reclaim_wait_ms` passed; still above then fails, naming
/// the pids and MiB. A GPU whose processes NVML cannot list warns (device totals cannot tell
/// whose memory it is).
std::vector<proto::HealthCheck> check_leftover_gpu_memory(const LeftoverMemorySource& source, int64_t limit_mb,
                                                          int64_t reclaim_wait_ms);

/// At most kMaxHealthChecks checks (the worst first when some must go; the last one then says
/// how many are not listed and their worst verdict), names and messages within their bounds.
std::vector<proto::HealthCheck> bound_health_checks(std::vector<proto::HealthCheck> checks);

/// Where HostHealthChecker looks; every part can be faked.
struct HealthEnvironment {
  std::string sysfs_root;   ///< sysfs_root_from_environment()
  std::string nvml_path;    ///< nvml_library_path(); "" for no GPU checks
  /// This run's processes; only the calling process when unset.
  std::function<std::set<int64_t>()> own_pids;
  /// Between two looks at leftover GPU memory (LeftoverMemorySource::pause); sleeps when unset.
  std::function<bool(int64_t ms)> pause;
  /// Readable when the checks should give up at once (the agent is exiting): a running site
  /// command is killed. -1: never.
  int stop_fd = -1;
};

/// Runs the checks a request asks for, and keeps what "since the last check" needs between
/// runs (link_downed counters, NVML). One thread at a time.
class HostHealthChecker {
 public:
  explicit HostHealthChecker(HealthEnvironment environment);
  ~HostHealthChecker();
  HostHealthChecker(const HostHealthChecker&) = delete;
  HostHealthChecker& operator=(const HostHealthChecker&) = delete;

  /// Every check, in order: GPUs, leftover GPU memory, InfiniBand, master interface,
  /// checkpoint directory, site command, site diagnose (only with `diagnose` and a command).
  /// `xids`: those seen since the last check (the resource sampler reads NVML's events).
  proto::HealthReport run(const proto::HealthRequest& request, const std::string& moment, bool diagnose,
                          const std::vector<proto::XidEvent>& xids = {});

 private:
  NvmlLibrary* nvml();

  HealthEnvironment environment_;
  bool nvml_tried_ = false;
  std::unique_ptr<NvmlLibrary> nvml_;
  std::map<std::string, int64_t> link_downed_seen_;
};

/// `dtrain agent --health-probe REQUEST_JSON`: the checks once (moment start; no diagnose,
/// which is for a host under suspicion), the report as one JSON line on stdout. 0, or 2 for a
/// request that does not parse.
int run_health_probe(const std::string& request_json);

}  // namespace dtrain::agent
