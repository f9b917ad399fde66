#pragma once
// The host's resources, measured by the agent at the heartbeat interval and sent on its beat
// (beat.resources, messages.h): CPU and memory of the host (/proc/stat, /proc/meminfo) and of
// each worker with everything below it (/proc/<pid>/stat), and every GPU through NVML
// (nvml_library.h) or, where NVML cannot be loaded, `nvidia-smi --query-gpu`. Internal to the
// agent module.
//
// HostSampler takes one sample when asked (tests drive it directly); ResourceSampler runs one
// on its own thread, because NVML calls and nvidia-smi can block for seconds and the agent's
// loop must keep answering.

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/agent/nvml_library.h"
#include "launcher/proto/agent_messages.h"

namespace dtrain::agent {

/// Held (shared) while a helper thread of the agent has a child process of its own running
/// (nvidia-smi, a site health command). The agent's loop reaps with waitpid(-1) — it is a child
/// subreaper — and would take that child's exit status from under its owner; while any helper
/// holds this, the loop (try_lock, exclusive) reaps its workers by pid. Shared, so that a health
/// command running 30 s does not hold the sampler's nvidia-smi back.
std::shared_mutex& helper_child_lock();

struct WatchedWorker {
  int gen = -1;
  int rank = -1;
  pid_t pid = 0;
};

/// `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw,
/// temperature.gpu,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total
/// --format=csv,noheader,nounits` output → GPUs. A field nvidia-smi prints as "[N/A]" (or any
/// other non-number) is left unset; a line without a numeric index is skipped.
std::vector<proto::GpuResources> parse_nvidia_smi_query(const std::string& csv);

/// The arguments after the program for the query above.
std::vector<std::string> nvidia_smi_query_arguments();

class HostSampler {
 public:
  struct Options {
    std::string nvml_path;            ///< nvml_library_path() by default
    int nvidia_smi_timeout_ms = 5'000;
  };
  explicit HostSampler(Options options);

  /// One sample. CPU percentages are over the time since the previous call (the first call's
  /// are over the time since boot for the host, and 0 for workers first seen).
  proto::HostResources sample(const std::vector<WatchedWorker>& workers, int64_t agent_time_ms);

 private:
  void sample_gpus(proto::HostResources& into, int64_t agent_time_ms);

  Options options_;
  bool gpu_source_chosen_ = false;
  std::unique_ptr<NvmlLibrary> nvml_;
  std::optional<std::string> nvidia_smi_;  ///< its path, when NVML could not be opened
  std::string nvml_error_;                 ///< why NVML is not used
  long long previous_busy_ticks_ = -1;
  long long previous_total_ticks_ = -1;
  int64_t previous_monotonic_ms_ = 0;
  std::map<pid_t, long long> previous_worker_ticks_;
};

/// HostSampler on its own thread, sampling every `interval_ms`. The agent tells it which
/// workers are alive and takes the newest sample at each beat.
class ResourceSampler {
 public:
  ResourceSampler(HostSampler::Options options, int64_t interval_ms);
  ~ResourceSampler();  ///< stops and joins the thread (waits out a running nvidia-smi, bounded)
  ResourceSampler(const ResourceSampler&) = delete;
  ResourceSampler& operator=(const ResourceSampler&) = delete;

  void set_workers(std::vector<WatchedWorker> workers);
  /// The newest sample not taken yet, with every Xid seen since the last take; nullopt when
  /// none was taken since.
  std::optional<proto::HostResources> take();
  /// Every Xid seen since the last call (the health checks' "since the last check"; the beat's
  /// take() gets them too). At most kMaxHealthXids are kept, the newest.
  std::vector<proto::XidEvent> take_xids_for_health();
  static constexpr size_t kMaxHealthXids = 256;

 private:
  void run();

  HostSampler sampler_;
  int64_t interval_ms_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<WatchedWorker> workers_;
  std::optional<proto::HostResources> latest_;
  std::vector<proto::XidEvent> pending_xids_;
  std::vector<proto::XidEvent> health_xids_;
  std::thread thread_;
};

}  // namespace dtrain::agent
