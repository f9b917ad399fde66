#pragma once
// NVML (the NVIDIA Management Library) opened at run time with dlopen, so that dtrain links no
// CUDA and runs on a host without the NVIDIA driver (then there simply is no library to open).
// The few NVML types and entry points it needs are declared in nvml_library.cpp, checked
// against nvml.h. Tests point DTRAIN_NVML_LIBRARY at a fake (tests/fakes/fake_nvml.cpp). Internal
// to the agent module; used by the resource sampler's thread only (NVML calls can block).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/proto/agent_messages.h"

namespace dtrain::agent {

/// The environment variable that names another NVML library (a path for dlopen).
inline constexpr const char* kNvmlLibraryVariable = "DTRAIN_NVML_LIBRARY";

/// $DTRAIN_NVML_LIBRARY when set, else "libnvidia-ml.so.1" (the name the driver installs).
std::string nvml_library_path();

class NvmlLibrary {
 public:
  /// dlopen + every symbol + nvmlInit_v2 + one handle per device. Xid events are registered
  /// where the device supports them (not an error where it does not). Errors name the library
  /// and the call: `libnvidia-ml.so.1: nvmlInit_v2: Driver Not Loaded`.
  static Result<std::unique_ptr<NvmlLibrary>> open(const std::string& path);
  ~NvmlLibrary();  ///< frees the event set, nvmlShutdown, dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  int device_count() const;
  /// One GPU's readings now; a value NVML cannot give for it is left unset.
  proto::GpuResources read(int index) const;
  /// The Xid events NVML queued since the last call (nvmlEventSetWait_v2 with timeout 0, so it
  /// never waits), stamped `agent_time_ms`.
  std::vector<proto::XidEvent> poll_xids(int64_t agent_time_ms);

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
