#include "launcher/agent/nvml_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>

namespace dtrain::agent {

// The NVML declarations dtrain uses, as nvml.h (CUDA 12/13) declares them. Only these: no CUDA
// header is needed to build the agent.
namespace nvml {
using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
using Device = void*;    // nvmlDevice_t (struct nvmlDevice_st*)
using EventSet = void*;  // nvmlEventSet_t
struct Utilization { unsigned int gpu; unsigned int memory; };                                // nvmlUtilization_t
struct Memory { unsigned long long total; unsigned long long free; unsigned long long used; };  // nvmlMemory_t
struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid, for nvmlEventTypeXidCriticalError
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
constexpr int kTemperatureGpu = 0;        // NVML_TEMPERATURE_GPU
constexpr int kMemoryErrorCorrected = 0;  // NVML_MEMORY_ERROR_TYPE_CORRECTED
constexpr int kMemoryErrorUncorrected = 1;
constexpr int kVolatileEcc = 0;           // NVML_VOLATILE_ECC
constexpr Return kInsufficientSize = 7;   // NVML_ERROR_INSUFFICIENT_SIZE
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
struct ProcessInfo {  // nvmlProcessInfo_t (_v2 and _v3 alike)
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
// nvmlFieldValue_t: the field asked for, and the value NVML put there (a union of 8 bytes).
struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;
  Return result;
  union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
  } value;
};
constexpr unsigned int kFieldGpuRecoveryAction = 230;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
}  // namespace nvml

struct NvmlLibrary::Api {
  nvml::Return (*init)();
  nvml::Return (*shutdown)();
  const char* (*error_string)(nvml::Return);
  nvml::Return (*device_count)(unsigned int*);
  nvml::Return (*handle_by_index)(unsigned int, nvml::Device*);
  nvml::Return (*utilization)(nvml::Device, nvml::Utilization*);
  nvml::Return (*memory)(nvml::Device, nvml::Memory*);
  nvml::Return (*power)(nvml::Device, unsigned int*);
  nvml::Return (*temperature)(nvml::Device, int, unsigned int*);
  nvml::Return (*ecc_errors)(nvml::Device, int, int, unsigned long long*);
  nvml::Return (*event_set_create)(nvml::EventSet*);
  nvml::Return (*register_events)(nvml::Device, unsigned long long, nvml::EventSet);
  nvml::Return (*event_set_wait)(nvml::EventSet, nvml::EventData*, unsigned int);
  nvml::Return (*event_set_free)(nvml::EventSet);
  // Optional (the health checks): null where this NVML lacks them; the reading is then unset.
  nvml::Return (*retired_pages_pending)(nvml::Device, int*);  // nvmlEnableState_t
  nvml::Return (*remapped_rows)(nvml::Device, unsigned int*, unsigned int*, unsigned int*, unsigned int*);
  nvml::Return (*throttle_reasons)(nvml::Device, unsigned long long*);
  nvml::Return (*compute_processes)(nvml::Device, unsigned int*, nvml::ProcessInfo*);
  nvml::Return (*field_values)(nvml::Device, int, nvml::FieldValue*);
};

std::string nvml_library_path() {
  const char* configured = std::getenv(kNvmlLibraryVariable);
  return configured && *configured ? configured : "libnvidia-ml.so.1";
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::open(const std::string& path, bool xid_events) {
  std::unique_ptr<NvmlLibrary> library(new NvmlLibrary());
  library->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library->handle_ == nullptr) {
    const char* why = ::dlerror();
    return Error::infra(path + ": cannot load (" + (why ? why : "dlopen failed") + ")");
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  auto resolve = [&](auto& slot, const char* name) {
    void* symbol = ::dlsym(library->handle_, name);
    if (symbol == nullptr && missing.empty()) missing = name;
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(symbol);
  };
  resolve(api->init, "nvmlInit_v2");
  resolve(api->shutdown, "nvmlShutdown");
  resolve(api->error_string, "nvmlErrorString");
  resolve(api->device_count, "nvmlDeviceGetCount_v2");
  resolve(api->handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(api->utilization, "nvmlDeviceGetUtilizationRates");
  resolve(api->memory, "nvmlDeviceGetMemoryInfo");
  resolve(api->power, "nvmlDeviceGetPowerUsage");
  resolve(api->temperature, "nvmlDeviceGetTemperature");
  resolve(api->ecc_errors, "nvmlDeviceGetTotalEccErrors");
  resolve(api->event_set_create, "nvmlEventSetCreate");
  resolve(api->register_events, "nvmlDeviceRegisterEvents");
  resolve(api->event_set_wait, "nvmlEventSetWait_v2");
  resolve(api->event_set_free, "nvmlEventSetFree");
  if (!missing.empty()) return Error::infra(path + ": has no " + missing + " (an NVML older than the driver API dtrain uses?)");
  auto resolve_optional = [&](auto& slot, std::initializer_list<const char*> names) {
    slot = nullptr;
    for (const char* name : names) {
      if (void* symbol = ::dlsym(library->handle_, name)) {
        slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(symbol);
        return;
      }
    }
  };
  resolve_optional(api->retired_pages_pending, {"nvmlDeviceGetRetiredPagesPendingStatus"});
  resolve_optional(api->remapped_rows, {"nvmlDeviceGetRemappedRows"});
  // Renamed ClocksEvent in CUDA 12.2; the old name stays exported for compatibility.
  resolve_optional(api->throttle_reasons, {"nvmlDeviceGetCurrentClocksEventReasons",
                                           "nvmlDeviceGetCurrentClocksThrottleReasons"});
  // v1 has another struct layout: not used.
  resolve_optional(api->compute_processes, {"nvmlDeviceGetComputeRunningProcesses_v3",
                                            "nvmlDeviceGetComputeRunningProcesses_v2"});
  resolve_optional(api->field_values, {"nvmlDeviceGetFieldValues"});
  library->api_ = std::move(api);
  const Api& nvml_api = *library->api_;
  auto failed = [&](const char* call, nvml::Return code) {
    const char* text = nvml_api.error_string ? nvml_api.error_string(code) : nullptr;
    return Error::infra(path + ": " + call + ": " + (text ? text : "error " + std::to_string(code)));
  };
  if (nvml::Return code = nvml_api.init(); code != nvml::kSuccess) return failed("nvmlInit_v2", code);
  library->initialised_ = true;
  unsigned int count = 0;
  if (nvml::Return code = nvml_api.device_count(&count); code != nvml::kSuccess) {
    return failed("nvmlDeviceGetCount_v2", code);
  }
  for (unsigned int index = 0; index < count; ++index) {
    nvml::Device device = nullptr;
    if (nvml::Return code = nvml_api.handle_by_index(index, &device); code != nvml::kSuccess) {
      return failed("nvmlDeviceGetHandleByIndex_v2", code);
    }
    library->devices_.push_back(device);
  }
  // Xid events: a device that cannot report them (not supported, or no permission) is simply
  // not registered; its other readings still come.
  if (!xid_events || nvml_api.event_set_create(&library->event_set_) != nvml::kSuccess) library->event_set_ = nullptr;
  bool any_registered = false;
  for (void* device : library->devices_) {
    if (library->event_set_ && nvml_api.register_events(device, nvml::kEventTypeXidCriticalError,
                                                        library->event_set_) == nvml::kSuccess) {
      any_registered = true;
    }
  }
  if (library->event_set_ && !any_registered) {
    nvml_api.event_set_free(library->event_set_);
    library->event_set_ = nullptr;
  }
  return library;
}

NvmlLibrary::~NvmlLibrary() {
  if (api_ && event_set_) api_->event_set_free(event_set_);
  if (api_ && initialised_) api_->shutdown();
  if (handle_) ::dlclose(handle_);
}

int NvmlLibrary::device_count() const { return static_cast<int>(devices_.size()); }

proto::GpuResources NvmlLibrary::read(int index) const {
  proto::GpuResources gpu;
  gpu.index = index;
  if (index < 0 || index >= device_count()) return gpu;
  nvml::Device device = devices_[static_cast<size_t>(index)];
  constexpr unsigned long long kMiB = 1ULL << 20;
  if (nvml::Utilization rates{}; api_->utilization(device, &rates) == nvml::kSuccess) {
    gpu.utilization_percent = rates.gpu;
  }
  if (nvml::Memory memory{}; api_->memory(device, &memory) == nvml::kSuccess) {
    gpu.memory_used_mb = static_cast<int64_t>(memory.used / kMiB);
    gpu.memory_total_mb = static_cast<int64_t>(memory.total / kMiB);
  }
  if (unsigned int milliwatts = 0; api_->power(device, &milliwatts) == nvml::kSuccess) {
    gpu.power_w = milliwatts / 1000.0;
  }
  if (unsigned int celsius = 0; api_->temperature(device, nvml::kTemperatureGpu, &celsius) == nvml::kSuccess) {
    gpu.temperature_c = celsius;
  }
  // NOT_SUPPORTED on a GPU without ECC (or with it off): the counts stay unset, not 0.
  unsigned long long errors = 0;
  if (api_->ecc_errors(device, nvml::kMemoryErrorCorrected, nvml::kVolatileEcc, &errors) == nvml::kSuccess) {
    gpu.ecc_corrected = static_cast<int64_t>(errors);
  }
  if (api_->ecc_errors(device, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &errors) == nvml::kSuccess) {
    gpu.ecc_uncorrected = static_cast<int64_t>(errors);
  }
  return gpu;
}

GpuHealthReadings NvmlLibrary::read_health(int index) const {
  GpuHealthReadings health;
  health.index = index;
  if (index < 0 || index >= device_count()) return health;
  nvml::Device device = devices_[static_cast<size_t>(index)];
  if (int pending = 0; api_->retired_pages_pending && api_->retired_pages_pending(device, &pending) == nvml::kSuccess) {
    health.retired_pages_pending = pending != 0;
  }
  unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
  if (api_->remapped_rows && api_->remapped_rows(device, &corrected, &uncorrected, &pending, &failed) == nvml::kSuccess) {
    health.row_remap_pending = pending != 0;
    health.row_remap_failed = failed != 0;
  }
  unsigned long long errors = 0;
  if (api_->ecc_errors(device, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &errors) == nvml::kSuccess) {
    health.ecc_uncorrected = static_cast<int64_t>(errors);
  }
  if (unsigned long long reasons = 0; api_->throttle_reasons && api_->throttle_reasons(device, &reasons) == nvml::kSuccess) {
    health.throttle_reasons = reasons;
  }
  // An NVML that does not know the field answers it with an error in the field, not the call.
  nvml::FieldValue field{};
  field.field_id = nvml::kFieldGpuRecoveryAction;
  if (api_->field_values && api_->field_values(device, 1, &field) == nvml::kSuccess && field.result == nvml::kSuccess) {
    health.recovery_action = field.value.ui;
  }
  return health;
}

std::optional<std::vector<GpuProcess>> NvmlLibrary::compute_processes(int index) const {
  if (index < 0 || index >= device_count() || !api_->compute_processes) return std::nullopt;
  nvml::Device device = devices_[static_cast<size_t>(index)];
  // Asked with room for 64; NVML says how many when that is too few (bounded: a count NVML
  // reports is not a reason to allocate without limit).
  std::vector<nvml::ProcessInfo> infos(64);
  unsigned int count = static_cast<unsigned int>(infos.size());
  nvml::Return code = api_->compute_processes(device, &count, infos.data());
  if (code == nvml::kInsufficientSize && count <= 4096) {
    infos.resize(count + 8);  // a few more may start meanwhile
    count = static_cast<unsigned int>(infos.size());
    code = api_->compute_processes(device, &count, infos.data());
  }
  if (code != nvml::kSuccess) return std::nullopt;
  std::vector<GpuProcess> processes;
  for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
    GpuProcess process{static_cast<int64_t>(infos[i].pid), std::nullopt};
    if (infos[i].used_gpu_memory != nvml::kValueNotAvailable) {
      process.used_mb = static_cast<int64_t>(infos[i].used_gpu_memory >> 20);
    }
    processes.push_back(process);
  }
  return processes;
}

std::vector<proto::XidEvent> NvmlLibrary::poll_xids(int64_t agent_time_ms) {
  std::vector<proto::XidEvent> xids;
  if (!event_set_) return xids;
  // Bounded: a driver flooding Xids must not keep the sampler here; the rest wait a beat.
  for (int i = 0; i < 256; ++i) {
    nvml::EventData data{};
    nvml::Return code = api_->event_set_wait(event_set_, &data, 0);
    if (code != nvml::kSuccess) break;  // NVML_ERROR_TIMEOUT: nothing queued
    if ((data.event_type & nvml::kEventTypeXidCriticalError) == 0) continue;
    int gpu = -1;
    for (size_t index = 0; index < devices_.size(); ++index) {
      if (devices_[index] == data.device) gpu = static_cast<int>(index);
    }
    xids.push_back({gpu < 0 ? 0 : gpu, static_cast<int64_t>(data.event_data), agent_time_ms});
  }
  return xids;
}

}  // namespace dtrain::agent
