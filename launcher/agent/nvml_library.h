#pragma once
// NVML (the NVIDIA Management Library) opened at run time with dlopen, so that dtrain links no
// CUDA and runs on a host without the NVIDIA driver (then there simply is no library to open).
// The few NVML types and entry points it needs are declared in nvml_library.cpp, checked
// against nvml.h. Tests point DTRAIN_NVML_LIBRARY at a fake (tests/fakes/fake_nvml.cpp). Internal
// to the agent module; used by the resource sampler's thread and, through a handle of its own, by the
// health checks' thread (NVML calls can block; neither runs on the agent's loop).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/proto/agent_messages.h"

namespace dtrain::agent {

/// The environment variable that names another NVML library (a path for dlopen).
inline constexpr const char* kNvmlLibraryVariable = "DTRAIN_NVML_LIBRARY";

/// $DTRAIN_NVML_LIBRARY when set, else "libnvidia-ml.so.1" (the name the driver installs).
std::string nvml_library_path();

/// nvmlDeviceGetCurrentClocksThrottleReasons bits that mean the hardware slowed the GPU down
/// (not the driver's own power or application caps): a cooling, power-supply or board problem.
inline constexpr uint64_t kThrottleHwSlowdown = 0x8;
inline constexpr uint64_t kThrottleHwThermal = 0x40;
inline constexpr uint64_t kThrottleHwPowerBrake = 0x80;

/// One GPU's health readings (the host health checks, issue 29). Each is unset where this GPU
/// or this NVML cannot give it (the entry point is missing, or NOT_SUPPORTED): not checked.
struct GpuHealthReadings {
  int index = 0;
  std::optional<bool> retired_pages_pending;  ///< nvmlDeviceGetRetiredPagesPendingStatus
  std::optional<bool> row_remap_pending;      ///< nvmlDeviceGetRemappedRows
  std::optional<bool> row_remap_failed;
  std::optional<int64_t> ecc_uncorrected;     ///< volatile: since the driver loaded
  std::optional<uint64_t> throttle_reasons;   ///< the raw bit mask
  /// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlDeviceGetFieldValues, drivers from R570): 0 none,
  /// 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset.
  std::optional<unsigned int> recovery_action;
};

/// A compute process on a GPU (nvmlDeviceGetComputeRunningProcesses). NVML gives host pids.
struct GpuProcess {
  int64_t pid = 0;
  std::optional<int64_t> used_mb;  ///< unset when NVML does not say (NVML_VALUE_NOT_AVAILABLE)
};

class NvmlLibrary {
 public:
  /// dlopen + every symbol + nvmlInit_v2 + one handle per device. Xid events are registered
  /// where the device supports them (not an error where it does not). Errors name the library
  /// and the call: `libnvidia-ml.so.1: nvmlInit_v2: Driver Not Loaded`.
  /// `xid_events` false: no event set (a second user in the same process, such as the health
  /// checks, must not take the resource sampler's Xids).
  static Result<std::unique_ptr<NvmlLibrary>> open(const std::string& path, bool xid_events = true);
  ~NvmlLibrary();  ///< frees the event set, nvmlShutdown, dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  int device_count() const;
  /// One GPU's readings now; a value NVML cannot give for it is left unset.
  proto::GpuResources read(int index) const;
  /// The Xid events NVML queued since the last call (nvmlEventSetWait_v2 with timeout 0, so it
  /// never waits), stamped `agent_time_ms`.
  std::vector<proto::XidEvent> poll_xids(int64_t agent_time_ms);
  /// One GPU's health readings now (optional entry points, resolved at open).
  GpuHealthReadings read_health(int index) const;
  /// The compute processes on one GPU; nullopt when NVML cannot list them here.
  std::optional<std::vector<GpuProcess>> compute_processes(int index) const;

  struct Api;  ///< the resolved entry points (nvml_library.cpp)

 private:
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;  ///< nvmlDevice_t by index
  void* event_set_ = nullptr;   ///< nvmlEventSet_t, or null when no device supports Xid events
  bool initialised_ = false;
};

}  // namespace dtrain::agent
