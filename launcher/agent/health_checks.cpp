// The host health checks that read state: GPUs (NVML), InfiniBand ports and the master's
// interface (sysfs), the bounding of a report, and the checker that runs them all. The checks
// that start something and wait (the checkpoint write, the site command, leftover GPU memory)
// are in health_system_checks.cpp.

#include "launcher/agent/health_checks.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"

namespace dtrain::agent {

using proto::HealthCheck;
using proto::HealthVerdict;

namespace {

// NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors): the ones whose resolution is a GPU
// reset, a node reboot or service, not an application restart.
struct FatalXid {
  int64_t xid;
  const char* meaning;
};
constexpr FatalXid kFatalXids[] = {
    {48, "double-bit ECC error"},
    {63, "ECC page retirement or row remapping recorded"},
    {64, "ECC page retirement or row remapping failed"},
    {74, "NVLink error"},
    {79, "the GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
};

const char* fatal_xid_meaning(int64_t xid) {
  for (const FatalXid& fatal : kFatalXids) {
    if (fatal.xid == xid) return fatal.meaning;
  }
  return nullptr;
}

/// What NVML's recommended recovery action asks for (nvmlGpuRecoveryAction_t); nullptr for none.
/// An action this build does not know is still one: the GPU wants something done to it.
const char* recovery_action_text(unsigned int action) {
  switch (action) {
    case 0: return nullptr;
    case 1: return "a GPU reset";
    case 2: return "a node reboot";
    case 3: return "draining peer-to-peer traffic";
    case 4: return "draining the GPU, then a reset";
    default: return "an action this dtrain does not know (NVML's nvmlGpuRecoveryAction_t)";
  }
}

/// A sysfs file's first line, trimmed; nullopt when it cannot be read.
std::optional<std::string> read_sysfs_line(const std::string& path) {
  Result<std::string> text = read_file(path);
  if (!text) return std::nullopt;
  std::string line(trim(std::string_view(*text).substr(0, std::min(text->find('\n'), size_t{256}))));
  return line;
}

std::optional<int64_t> read_sysfs_integer(const std::string& path) {
  std::optional<std::string> line = read_sysfs_line(path);
  if (!line || line->empty()) return std::nullopt;
  char* end = nullptr;
  long long value = std::strtoll(line->c_str(), &end, 10);
  if (end == line->c_str() || *end != '\0' || value < 0) return std::nullopt;
  return value;
}

/// The names of the directory's entries, sorted; none when it cannot be read. Bounded: a tree
/// with thousands of entries is not a host's NIC list.
std::vector<std::string> directory_names(const std::string& path) {
  std::vector<std::string> names;
  std::error_code error;
  std::filesystem::directory_iterator it(path, error);
  for (; !error && it != std::filesystem::directory_iterator() && names.size() < 256; it.increment(error)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string join_reasons(const std::vector<std::string>& reasons) { return join(reasons, "; "); }

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof text);
  }
  return text;
}

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

int severity(HealthVerdict verdict) { return static_cast<int>(verdict); }

}  // namespace

std::string sysfs_root_from_environment() {
  const char* root = std::getenv(kSysfsRootVariable);
  return root ? root : "";
}

bool is_fatal_xid(int64_t xid) { return fatal_xid_meaning(xid) != nullptr; }

std::vector<HealthCheck> check_gpu_health(const std::vector<GpuHealthReadings>& gpus,
                                          const std::vector<proto::XidEvent>& xids) {
  std::map<int, const GpuHealthReadings*> by_index;
  for (const GpuHealthReadings& gpu : gpus) by_index[gpu.index] = &gpu;
  std::map<int, std::vector<int64_t>> xids_by_gpu;
  for (const proto::XidEvent& event : xids) {
    if (event.gpu >= 0) xids_by_gpu[event.gpu].push_back(event.xid);
  }
  std::set<int> indices;
  for (const auto& [index, gpu] : by_index) indices.insert(index);
  for (const auto& [index, list] : xids_by_gpu) indices.insert(index);

  std::vector<HealthCheck> checks;
  for (int index : indices) {
    std::vector<std::string> failures;
    std::vector<std::string> warnings;
    std::vector<std::string> looked_at;
    if (auto it = by_index.find(index); it != by_index.end()) {
      const GpuHealthReadings& gpu = *it->second;
      if (gpu.retired_pages_pending) {
        looked_at.push_back("page retirement");
        if (*gpu.retired_pages_pending) failures.push_back("memory pages are waiting to be retired");
      }
      if (gpu.row_remap_pending) {
        looked_at.push_back("row remapping");
        if (*gpu.row_remap_pending) failures.push_back("a memory row remap is pending");
        if (gpu.row_remap_failed.value_or(false)) failures.push_back("a memory row remap FAILED (the GPU needs service)");
      }
      if (gpu.ecc_uncorrected) {
        looked_at.push_back("uncorrected ECC");
        if (*gpu.ecc_uncorrected > 0) {
          failures.push_back(std::to_string(*gpu.ecc_uncorrected) + " uncorrected ECC error(s) since the driver loaded");
        }
      }
      if (gpu.recovery_action) {
        looked_at.push_back("NVML's recovery action");
        if (const char* action = recovery_action_text(*gpu.recovery_action)) {
          failures.push_back(std::string("NVML recommends: ") + action);
        }
      }
      if (gpu.throttle_reasons) {
        looked_at.push_back("clock throttling");
        std::vector<std::string> reasons;
        if (*gpu.throttle_reasons & kThrottleHwSlowdown) reasons.push_back("HW slowdown");
        if (*gpu.throttle_reasons & kThrottleHwThermal) reasons.push_back("HW thermal slowdown");
        if (*gpu.throttle_reasons & kThrottleHwPowerBrake) reasons.push_back("HW power brake");
        if (!reasons.empty()) {
          warnings.push_back("clocks throttled for hardware reasons (" + join(reasons, ", ") +
                             "): check the cooling and the power supply");
        }
      }
    }
    looked_at.push_back("Xids");
    std::vector<std::string> fatal;
    std::vector<std::string> other;
    for (int64_t xid : xids_by_gpu[index]) {
      if (const char* meaning = fatal_xid_meaning(xid)) fatal.push_back("Xid " + std::to_string(xid) + " (" + meaning + ")");
      else other.push_back(std::to_string(xid));
    }
    if (!fatal.empty()) failures.push_back(join(fatal, ", ") + " since the last check");
    if (!other.empty()) {
      warnings.push_back("Xid " + join(other, ", ") + " since the last check (usually an application's fault; "
                         "see NVIDIA's Xid catalogue)");
    }
    HealthCheck check{"gpu " + std::to_string(index), HealthVerdict::ok, ""};
    if (!failures.empty()) {
      check.verdict = HealthVerdict::fail;
      std::vector<std::string> all = failures;
      all.insert(all.end(), warnings.begin(), warnings.end());
      check.message = join_reasons(all) + "; fix: reset the GPU (nvidia-smi -r -i " + std::to_string(index) +
                      ") or reboot the host; if it comes back, have the GPU serviced";
    } else if (!warnings.empty()) {
      check.verdict = HealthVerdict::warn;
      check.message = join_reasons(warnings);
    } else {
      check.message = "healthy (checked: " + join(looked_at, ", ") + ")";
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

std::vector<HealthCheck> check_infiniband(const std::string& sysfs_root, std::map<std::string, int64_t>& link_downed_seen) {
  std::vector<HealthCheck> checks;
  std::string base = sysfs_root + "/sys/class/infiniband";
  std::error_code error;
  if (!std::filesystem::is_directory(base, error)) return checks;
  for (const std::string& device : directory_names(base)) {
    std::string ports = base + "/" + device + "/ports";
    for (const std::string& port : directory_names(ports)) {
      std::string where = ports + "/" + port;
      std::string name = device + "/" + port;
      HealthCheck check{"infiniband " + name, HealthVerdict::ok, ""};
      std::optional<std::string> state = read_sysfs_line(where + "/state");
      bool active = state && *state == "4: ACTIVE";
      std::vector<std::string> findings;
      if (!state) {
        check.verdict = HealthVerdict::warn;
        findings.push_back("cannot read " + where + "/state");
      } else if (!active && read_sysfs_line(where + "/phys_state").value_or("") == "3: Disabled") {
        // Switched off on purpose (ibportstate ... disable): a port nobody uses, not a fault.
        findings.push_back("disabled (phys_state 3: Disabled): not used, not checked");
      } else if (!active) {
        check.verdict = HealthVerdict::fail;
        findings.push_back("port " + name + " is " + printable(*state, 64) + ", not 4: ACTIVE; fix: check the cable "
                           "and the switch port (ibstat " + device + "), or leave the HCA out (NCCL_IB_HCA)");
      }
      std::optional<int64_t> downed = read_sysfs_integer(where + "/counters/link_downed");
      if (downed) {
        auto seen = link_downed_seen.find(name);
        if (seen != link_downed_seen.end() && *downed > seen->second) {
          if (check.verdict == HealthVerdict::ok) check.verdict = HealthVerdict::warn;
          findings.push_back("the link went down " + std::to_string(*downed - seen->second) +
                             " time(s) since the last check (link_downed " + std::to_string(*downed) +
                             "): a flapping link; check the cable and the switch port");
        }
        link_downed_seen[name] = *downed;
      }
      check.message = findings.empty() ? "4: ACTIVE" + (downed ? ", link_downed " + std::to_string(*downed) : std::string())
                                       : join_reasons(findings);
      checks.push_back(std::move(check));
    }
  }
  return checks;
}

HealthCheck check_master_interface(const std::string& sysfs_root, const std::string& master_addr) {
  HealthCheck check{"master interface", HealthVerdict::ok, ""};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int error = ::getaddrinfo(master_addr.c_str(), "9", &hints, &found); error != 0 || found == nullptr) {
    check.verdict = HealthVerdict::fail;
    check.message = "the master '" + printable(master_addr, 256) + "' does not resolve here (" + ::gai_strerror(error) +
                    "); fix: this host's DNS or /etc/hosts";
    return check;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  // A UDP connect sends nothing; it only asks the kernel which source address it would route from.
  UniqueFd probe(::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  std::string master_text = address_text(found->ai_addr);
  if (!probe.valid() || ::connect(probe.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    check.verdict = HealthVerdict::fail;
    check.message = "no route from here to the master " + printable(master_addr, 256) + " (" + master_text + "): " +
                    errno_text(errno) + "; fix: the host's network configuration (ip route get " + master_text + ")";
    return check;
  }
  ifaddrs* interfaces = nullptr;
  std::string interface;
  if (::getifaddrs(&interfaces) == 0) {
    for (ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
      if (same_address(entry->ifa_addr, reinterpret_cast<const sockaddr*>(&local))) {
        interface = entry->ifa_name;
        break;
      }
    }
    ::freeifaddrs(interfaces);
  }
  std::string source = address_text(reinterpret_cast<const sockaddr*>(&local));
  std::string route = "the route to the master " + printable(master_addr, 256) + " (" + master_text + ") from " + source;
  if (interface.empty() || interface.find('/') != std::string::npos || interface == "." || interface == "..") {
    check.verdict = HealthVerdict::warn;
    check.message = route + " uses no interface of this host that getifaddrs lists; its state is not checked";
    return check;
  }
  std::string path = sysfs_root + "/sys/class/net/" + interface + "/operstate";
  std::optional<std::string> state = read_sysfs_line(path);
  if (!state) {
    check.verdict = HealthVerdict::warn;
    check.message = route + " goes through " + interface + ", whose state cannot be read (" + path + ")";
  } else if (*state == "up" || *state == "unknown") {
    check.message = interface + " is " + *state + " (" + route + ")";
  } else {
    check.verdict = HealthVerdict::fail;
    check.message = interface + " is " + printable(*state, 32) + " (" + route + "); fix: bring it up (ip link set " +
                    interface + " up) or check its cable and switch port";
  }
  return check;
}

std::vector<HealthCheck> bound_health_checks(std::vector<HealthCheck> checks) {
  auto truncate = [](std::string& text, size_t max_bytes) {
    if (text.size() <= max_bytes) return;
    size_t cut = max_bytes - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
    text = text.substr(0, cut) + "...";
  };
  if (checks.size() > proto::kMaxHealthChecks) {
    std::stable_sort(checks.begin(), checks.end(), [](const HealthCheck& a, const HealthCheck& b) {
      return severity(a.verdict) > severity(b.verdict);
    });
    size_t kept = proto::kMaxHealthChecks - 1;
    HealthVerdict worst = HealthVerdict::ok;
    for (size_t i = kept; i < checks.size(); ++i) {
      if (severity(checks[i].verdict) > severity(worst)) worst = checks[i].verdict;
    }
    HealthCheck more{"more checks", worst,
                     std::to_string(checks.size() - kept) + " more checks not listed, the worst of them " +
                         proto::to_string(worst)};
    checks.resize(kept);
    checks.push_back(std::move(more));
  }
  for (HealthCheck& check : checks) {
    truncate(check.name, proto::kMaxHealthNameBytes);
    truncate(check.message, proto::kMaxHealthMessageBytes);
  }
  return checks;
}

HostHealthChecker::HostHealthChecker(HealthEnvironment environment) : environment_(std::move(environment)) {}
HostHealthChecker::~HostHealthChecker() = default;

NvmlLibrary* HostHealthChecker::nvml() {
  if (!nvml_tried_ && !environment_.nvml_path.empty()) {
    nvml_tried_ = true;
    // No Xid events of its own: in the agent the resource sampler reads them (take_xids).
    Result<std::unique_ptr<NvmlLibrary>> opened = NvmlLibrary::open(environment_.nvml_path, false);
    if (opened) nvml_ = std::move(*opened);
  }
  return nvml_.get();
}

proto::HealthReport HostHealthChecker::run(const proto::HealthRequest& request, const std::string& moment, bool diagnose,
                                           const std::vector<proto::XidEvent>& xids) {
  SystemClock clock;
  int64_t started = clock.monotonic_ms();
  proto::HealthReport report;
  report.moment = moment;
  std::vector<HealthCheck>& checks = report.checks;
  auto add = [&](std::vector<HealthCheck> more) { checks.insert(checks.end(), more.begin(), more.end()); };

  if (NvmlLibrary* library = nvml()) {
    std::vector<GpuHealthReadings> gpus;
    for (int index = 0; index < library->device_count(); ++index) gpus.push_back(library->read_health(index));
    add(check_gpu_health(gpus, xids));
    LeftoverMemorySource source;
    source.gpu_count = library->device_count();
    source.processes = [library](int gpu) { return library->compute_processes(gpu); };
    source.own_pids = environment_.own_pids ? environment_.own_pids
                                            : [] { return std::set<int64_t>{static_cast<int64_t>(::getpid())}; };
    source.pause = environment_.pause ? environment_.pause
                                      : [](int64_t ms) {
                                        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
                                        return true;
                                      };
    source.now_ms = [&clock] { return clock.monotonic_ms(); };
    add(check_leftover_gpu_memory(source, request.leftover_gpu_memory_mb, request.reclaim_wait_ms));
  } else if (!xids.empty()) {
    add(check_gpu_health({}, xids));
  }
  add(check_infiniband(environment_.sysfs_root, link_downed_seen_));
  if (request.master_addr) checks.push_back(check_master_interface(environment_.sysfs_root, *request.master_addr));
  if (request.checkpoint_dir) {
    checks.push_back(check_checkpoint_dir(*request.checkpoint_dir, request.write_timeout_ms, request.min_free_mb));
  }
  if (!request.command.empty()) {
    SiteCommandResult ran = run_site_command(request.command, request.command_timeout_ms, environment_.stop_fd);
    checks.push_back(judge_site_command(ran, request.command_timeout_ms));
  }
  if (diagnose && !request.diagnose.empty()) {
    SiteCommandResult ran = run_site_command(request.diagnose, request.diagnose_timeout_ms, environment_.stop_fd);
    checks.push_back(judge_site_diagnose(ran, request.diagnose_timeout_ms));
  }
  report.checks = bound_health_checks(std::move(report.checks));
  report.ms = clock.monotonic_ms() - started;
  return report;
}

int run_health_probe(const std::string& request_json) {
  nlohmann::json parsed = nlohmann::json::parse(request_json, nullptr, false);
  if (parsed.is_discarded()) {
    std::fprintf(stderr, "dtrain agent --health-probe: the request is not JSON\n");
    return 2;
  }
  Result<proto::HealthRequest> request = proto::parse_health_request(parsed, "health request");
  if (!request) {
    std::fprintf(stderr, "dtrain agent --health-probe: %s\n", request.error().message.c_str());
    return 2;
  }
  HostHealthChecker checker({sysfs_root_from_environment(), nvml_library_path(), {}, {}, -1});
  proto::HealthReport report = checker.run(*request, proto::health_moment::kStart, false);
  std::printf("%s\n", json_compact(proto::to_json(report)).c_str());
  return 0;
}

}  // namespace dtrain::agent
