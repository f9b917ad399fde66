/* A fake libnvidia-ml for tests: the NVML entry points dtrain's agent resolves
 * (launcher/agent/nvml_library.cpp), answering from a file so a test can change the readings
 * while a run goes on. The agent loads it through DTRAIN_NVML_LIBRARY.
 *
 * $DTRAIN_FAKE_NVML_VALUES names a file of key=value lines, re-read at every call:
 *   gpus=2  utilization=37  memory_used_mb=1024  memory_total_mb=81920  power_mw=215000
 *   temperature=61  ecc_corrected=0  ecc_uncorrected=0  no_ecc=1  init_error=9
 *   xid=<gpu>:<xid>   (one line per Xid; each is delivered once, in order)
 * Health readings (every GPU alike): retired_pages_pending=1  remap_pending=1  remap_failure=1
 *   throttle_reasons=<bit mask, decimal or 0x..>  no_health=1 (those entry points answer
 *   NOT_SUPPORTED)  recovery_action=<0..4> (field 230 of nvmlDeviceGetFieldValues; any other
 *   field answers NOT_SUPPORTED inside the field)
 * Compute processes: process=<gpu>:<pid>:<MiB>  (one line each; MiB "na": NVML does not say)
 *   no_process_list=1 (nvmlDeviceGetComputeRunningProcesses_v3 answers NOT_SUPPORTED)
 * Without the variable or the file: 2 GPUs with the defaults above, no Xids, healthy, no
 * processes. */
#include <cstdio>
#include <cstdlib>
#include <cstring>

// C++ only because the project builds no C; the entry points keep their C names.
extern "C" {

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

enum { kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kInsufficientSize = 7, kTimeout = 10 };
#define kMaxXids 64
#define kMaxProcesses 64

struct Values {
  long long gpus, utilization, memory_used_mb, memory_total_mb, power_mw, temperature;
  long long ecc_corrected, ecc_uncorrected, no_ecc, init_error;
  int xid_count;
  int xid_gpu[kMaxXids];
  long long xid[kMaxXids];
  long long retired_pages_pending, remap_pending, remap_failure, no_health, no_process_list;
  unsigned long long throttle_reasons;
  long long recovery_action;
  int process_count;
  int process_gpu[kMaxProcesses];
  unsigned int process_pid[kMaxProcesses];
  long long process_mb[kMaxProcesses];  /* -1: not available */
};

static struct nvmlDevice_st { int index; } devices[16];
static struct nvmlEventSet_st { int unused; } event_set;
static int xids_delivered;

static struct Values read_values(void) {
  struct Values v;
  memset(&v, 0, sizeof v);
  v.gpus = 2;
  v.utilization = 37;
  v.memory_used_mb = 1024;
  v.memory_total_mb = 81920;
  v.power_mw = 215000;
  v.temperature = 61;
  const char* path = getenv("DTRAIN_FAKE_NVML_VALUES");
  FILE* file = path ? fopen(path, "r") : NULL;
  if (!file) return v;
  char line[256];
  while (fgets(line, sizeof line, file)) {
    char* equals = strchr(line, '=');
    if (!equals) continue;
    *equals = '\0';
    const char* value = equals + 1;
    if (strcmp(line, "xid") == 0) {
      if (v.xid_count < kMaxXids) {
        v.xid_gpu[v.xid_count] = atoi(value);
        const char* colon = strchr(value, ':');
        v.xid[v.xid_count++] = colon ? atoll(colon + 1) : 0;
      }
      continue;
    }
    if (strcmp(line, "process") == 0) {
      if (v.process_count < kMaxProcesses) {
        char* rest = NULL;
        v.process_gpu[v.process_count] = (int)strtol(value, &rest, 10);
        unsigned int pid = 0;
        long long mb = -1;
        if (rest && *rest == ':') {
          pid = (unsigned int)strtoul(rest + 1, &rest, 10);
          if (rest && *rest == ':' && strncmp(rest + 1, "na", 2) != 0) mb = atoll(rest + 1);
        }
        v.process_pid[v.process_count] = pid;
        v.process_mb[v.process_count++] = mb;
      }
      continue;
    }
    if (strcmp(line, "throttle_reasons") == 0) {
      v.throttle_reasons = strtoull(value, NULL, 0);
      continue;
    }
    long long number = atoll(value);
    if (strcmp(line, "gpus") == 0) v.gpus = number < 16 ? number : 16;
    else if (strcmp(line, "utilization") == 0) v.utilization = number;
    else if (strcmp(line, "memory_used_mb") == 0) v.memory_used_mb = number;
    else if (strcmp(line, "memory_total_mb") == 0) v.memory_total_mb = number;
    else if (strcmp(line, "power_mw") == 0) v.power_mw = number;
    else if (strcmp(line, "temperature") == 0) v.temperature = number;
    else if (strcmp(line, "ecc_corrected") == 0) v.ecc_corrected = number;
    else if (strcmp(line, "ecc_uncorrected") == 0) v.ecc_uncorrected = number;
    else if (strcmp(line, "no_ecc") == 0) v.no_ecc = number;
    else if (strcmp(line, "init_error") == 0) v.init_error = number;
    else if (strcmp(line, "retired_pages_pending") == 0) v.retired_pages_pending = number;
    else if (strcmp(line, "remap_pending") == 0) v.remap_pending = number;
    else if (strcmp(line, "remap_failure") == 0) v.remap_failure = number;
    else if (strcmp(line, "no_health") == 0) v.no_health = number;
    else if (strcmp(line, "no_process_list") == 0) v.no_process_list = number;
    else if (strcmp(line, "recovery_action") == 0) v.recovery_action = number;
  }
  fclose(file);
  return v;
}

nvmlReturn_t nvmlInit_v2(void) { return (nvmlReturn_t)read_values().init_error; }
nvmlReturn_t nvmlShutdown(void) { return kSuccess; }
const char* nvmlErrorString(nvmlReturn_t code) { return code == 9 ? "Driver Not Loaded" : "Fake NVML error"; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = (unsigned int)read_values().gpus;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= 16) return kInvalidArgument;
  devices[index].index = (int)index;
  *device = &devices[index];
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* rates) {
  (void)device;
  rates->gpu = (unsigned int)read_values().utilization;
  rates->memory = 0;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  (void)device;
  struct Values v = read_values();
  memory->total = (unsigned long long)v.memory_total_mb << 20;
  memory->used = (unsigned long long)v.memory_used_mb << 20;
  memory->free = memory->total - memory->used;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  (void)device;
  *milliwatts = (unsigned int)read_values().power_mw;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int* celsius) {
  (void)device;
  (void)sensor;
  *celsius = (unsigned int)read_values().temperature;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int type, int counter, unsigned long long* count) {
  (void)device;
  (void)counter;
  struct Values v = read_values();
  if (v.no_ecc) return kNotSupported;
  *count = (unsigned long long)(type == 0 ? v.ecc_corrected : v.ecc_uncorrected);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int* pending) {
  (void)device;
  struct Values v = read_values();
  if (v.no_health) return kNotSupported;
  *pending = v.retired_pages_pending ? 1 : 0;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrected, unsigned int* uncorrected,
                                       unsigned int* pending, unsigned int* failure) {
  (void)device;
  struct Values v = read_values();
  if (v.no_health) return kNotSupported;
  *corrected = 0;
  *uncorrected = 0;
  *pending = v.remap_pending ? 1 : 0;
  *failure = v.remap_failure ? 1 : 0;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  (void)device;
  struct Values v = read_values();
  if (v.no_health) return kNotSupported;
  *reasons = v.throttle_reasons;
  return kSuccess;
}

typedef struct {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  union { double d; unsigned int ui; unsigned long long ull; } value;
} nvmlFieldValue_t;

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t* values) {
  (void)device;
  struct Values v = read_values();
  if (count < 0 || (count > 0 && !values)) return kInvalidArgument;
  for (int i = 0; i < count; ++i) {
    if (values[i].fieldId == 230 && !v.no_health) {
      values[i].nvmlReturn = kSuccess;
      values[i].valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
      values[i].value.ui = (unsigned int)v.recovery_action;
    } else {
      values[i].nvmlReturn = kNotSupported;
    }
  }
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos) {
  struct Values v = read_values();
  if (v.no_process_list) return kNotSupported;
  unsigned int found = 0;
  for (int i = 0; i < v.process_count; ++i) {
    if (v.process_gpu[i] == device->index) ++found;
  }
  if (found > *count) {
    *count = found;
    return kInsufficientSize;
  }
  unsigned int written = 0;
  for (int i = 0; i < v.process_count; ++i) {
    if (v.process_gpu[i] != device->index) continue;
    memset(&infos[written], 0, sizeof infos[written]);
    infos[written].pid = v.process_pid[i];
    infos[written].usedGpuMemory = v.process_mb[i] < 0 ? ~0ULL : (unsigned long long)v.process_mb[i] << 20;
    ++written;
  }
  *count = written;
  return kSuccess;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  *set = &event_set;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
  (void)device;
  (void)set;
  return (types & 0x8) ? kSuccess : kNotSupported;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  (void)set;
  (void)timeout_ms;
  struct Values v = read_values();
  if (xids_delivered >= v.xid_count) return kTimeout;
  int gpu = v.xid_gpu[xids_delivered];
  memset(data, 0, sizeof *data);
  data->device = &devices[gpu >= 0 && gpu < 16 ? gpu : 0];
  data->eventType = 0x8;
  data->eventData = (unsigned long long)v.xid[xids_delivered++];
  return kSuccess;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  (void)set;
  return kSuccess;
}

}  // extern "C"
