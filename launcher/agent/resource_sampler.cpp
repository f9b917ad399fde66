#include "launcher/agent/resource_sampler.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "launcher/agent/host_facts.h"
#include "launcher/agent/process_tree.h"
#include "launcher/base/child_process.h"
#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"

namespace dtrain::agent {
namespace {

struct HostCpuTicks {
  long long busy = 0;
  long long total = 0;
};

// /proc/stat's first line: "cpu user nice system idle iowait irq softirq steal ...". Idle and
// iowait are not busy; guest time is already inside user.
std::optional<HostCpuTicks> read_host_cpu_ticks() {
  Result<std::string> stat = read_file("/proc/stat");
  if (!stat || stat->compare(0, 4, "cpu ") != 0) return std::nullopt;
  std::vector<std::string> fields = split(std::string_view(*stat).substr(0, stat->find('\n')), ' ');
  std::vector<long long> values;
  for (const std::string& field : fields) {
    if (field.empty() || field == "cpu") continue;
    values.push_back(std::strtoll(field.c_str(), nullptr, 10));
  }
  if (values.size() < 8) return std::nullopt;
  HostCpuTicks ticks;
  for (size_t i = 0; i < 8; ++i) ticks.total += values[i];
  ticks.busy = ticks.total - values[3] - values[4];
  return ticks;
}

std::optional<double> csv_number(std::string_view field) {
  std::string text(trim(field));
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return std::nullopt;  // "[N/A]", "[Not Supported]"
  return value;
}

std::optional<int64_t> csv_integer(std::string_view field) {
  std::optional<double> value = csv_number(field);
  if (!value || *value < 0) return std::nullopt;
  return static_cast<int64_t>(*value);
}

}  // namespace

std::shared_mutex& helper_child_lock() {
  static std::shared_mutex lock;
  return lock;
}

std::vector<std::string> nvidia_smi_query_arguments() {
  return {"--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,"
          "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total",
          "--format=csv,noheader,nounits"};
}

std::vector<proto::GpuResources> parse_nvidia_smi_query(const std::string& csv) {
  std::vector<proto::GpuResources> gpus;
  for (const std::string& line : split(csv, '\n')) {
    std::vector<std::string> fields = split(line, ',');
    if (fields.size() < 8) continue;
    std::optional<int64_t> index = csv_integer(fields[0]);
    if (!index || *index > 1'000'000) continue;
    proto::GpuResources gpu;
    gpu.index = static_cast<int>(*index);
    gpu.utilization_percent = csv_number(fields[1]);
    gpu.memory_used_mb = csv_integer(fields[2]);
    gpu.memory_total_mb = csv_integer(fields[3]);
    gpu.power_w = csv_number(fields[4]);
    if (std::optional<double> celsius = csv_number(fields[5])) gpu.temperature_c = static_cast<int64_t>(*celsius);
    gpu.ecc_corrected = csv_integer(fields[6]);
    gpu.ecc_uncorrected = csv_integer(fields[7]);
    gpus.push_back(gpu);
  }
  return gpus;
}

HostSampler::HostSampler(Options options) : options_(std::move(options)) {
  if (options_.nvml_path.empty()) options_.nvml_path = nvml_library_path();
}

proto::HostResources HostSampler::sample(const std::vector<WatchedWorker>& workers, int64_t agent_time_ms) {
  proto::HostResources resources;
  resources.agent_time_ms = agent_time_ms;
  int64_t now = SystemClock().monotonic_ms();
  double seconds = previous_monotonic_ms_ > 0 ? (now - previous_monotonic_ms_) / 1000.0 : 0;
  previous_monotonic_ms_ = now;

  if (std::optional<HostCpuTicks> ticks = read_host_cpu_ticks()) {
    long long busy = ticks->busy - std::max(previous_busy_ticks_, 0LL);
    long long total = ticks->total - std::max(previous_total_ticks_, 0LL);
    if (total > 0) resources.cpu_percent = std::clamp(100.0 * static_cast<double>(busy) / static_cast<double>(total), 0.0, 100.0);
    previous_busy_ticks_ = ticks->busy;
    previous_total_ticks_ = ticks->total;
  }
  if (Result<std::string> meminfo = read_file("/proc/meminfo")) {
    std::optional<int64_t> total = meminfo_field_mb(*meminfo, "MemTotal");
    std::optional<int64_t> available = meminfo_field_mb(*meminfo, "MemAvailable");
    resources.memory_total_mb = total;
    if (total && available) resources.memory_used_mb = *total - *available;
  }

  if (!workers.empty()) {
    // One scan of /proc for all workers: each worker's tree is summed from the snapshot.
    std::vector<ProcessEntry> snapshot = scan_processes();
    static const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
    static const long page_bytes = ::sysconf(_SC_PAGESIZE);
    std::map<pid_t, long long> worker_ticks;
    for (const WatchedWorker& worker : workers) {
      auto root = std::find_if(snapshot.begin(), snapshot.end(),
                               [&](const ProcessEntry& entry) { return entry.pid == worker.pid; });
      if (root == snapshot.end()) continue;  // exited meanwhile: its exit frame says so
      proto::WorkerResources usage;
      usage.gen = worker.gen;
      usage.rank = worker.rank;
      usage.pid = worker.pid;
      long long ticks = root->cpu_ticks;
      long long pages = root->rss_pages;
      std::vector<ProcessEntry> below = descendants_of(worker.pid, snapshot);
      for (const ProcessEntry& entry : below) {
        ticks += entry.cpu_ticks;
        pages += entry.rss_pages;
      }
      usage.processes = static_cast<int>(below.size()) + 1;
      usage.rss_mb = pages * page_bytes / (1 << 20);
      auto previous = previous_worker_ticks_.find(worker.pid);
      if (previous != previous_worker_ticks_.end() && seconds > 0 && ticks_per_second > 0) {
        double used = static_cast<double>(std::max(ticks - previous->second, 0LL)) / static_cast<double>(ticks_per_second);
        usage.cpu_percent = 100.0 * used / seconds;
      }
      worker_ticks[worker.pid] = ticks;
      resources.workers.push_back(usage);
    }
    previous_worker_ticks_ = std::move(worker_ticks);
  } else {
    previous_worker_ticks_.clear();
  }

  sample_gpus(resources, agent_time_ms);
  return resources;
}

void HostSampler::sample_gpus(proto::HostResources& into, int64_t agent_time_ms) {
  if (!gpu_source_chosen_) {
    // Once: NVML if it loads, else nvidia-smi if installed, else no GPU readings (a CPU host).
    gpu_source_chosen_ = true;
    Result<std::unique_ptr<NvmlLibrary>> opened = NvmlLibrary::open(options_.nvml_path);
    if (opened) {
      nvml_ = std::move(*opened);
    } else {
      nvml_error_ = opened.error().message;
      nvidia_smi_ = find_on_path("nvidia-smi");
    }
  }
  if (nvml_) {
    into.gpu_source = "nvml";
    for (int index = 0; index < nvml_->device_count(); ++index) into.gpus.push_back(nvml_->read(index));
    into.xids = nvml_->poll_xids(agent_time_ms);
    return;
  }
  if (!nvidia_smi_) return;
  into.gpu_source = "nvidia-smi";
  std::vector<std::string> argv = {*nvidia_smi_};
  for (std::string& argument : nvidia_smi_query_arguments()) argv.push_back(std::move(argument));
  Result<CommandOutput> ran = [&] {
    std::shared_lock<std::shared_mutex> child_running(helper_child_lock());
    return run_command(argv, Millis(options_.nvidia_smi_timeout_ms));
  }();
  if (!ran) {
    into.gpu_error = ran.error().message + " (NVML: " + nvml_error_ + ")";
  } else if (ran->exit_code != 0) {
    std::string why(trim(ran->err.empty() ? ran->out : ran->err));
    into.gpu_error = "nvidia-smi exited with code " + std::to_string(ran->exit_code) +
                     (why.empty() ? "" : ": " + printable(why, 512)) + " (NVML: " + nvml_error_ + ")";
  } else {
    into.gpus = parse_nvidia_smi_query(ran->out);
  }
}

ResourceSampler::ResourceSampler(HostSampler::Options options, int64_t interval_ms)
    : sampler_(std::move(options)), interval_ms_(std::max<int64_t>(interval_ms, 100)) {
  thread_ = std::thread([this] { run(); });
}

ResourceSampler::~ResourceSampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ResourceSampler::set_workers(std::vector<WatchedWorker> workers) {
  std::lock_guard<std::mutex> lock(mutex_);
  workers_ = std::move(workers);
}

std::optional<proto::HostResources> ResourceSampler::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<proto::HostResources> newest = std::exchange(latest_, std::nullopt);
  if (newest) newest->xids = std::exchange(pending_xids_, {});
  return newest;
}

std::vector<proto::XidEvent> ResourceSampler::take_xids_for_health() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(health_xids_, {});
}

void ResourceSampler::run() {
  ::pthread_setname_np(::pthread_self(), "dtrain-sampler");
  SystemClock clock;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    std::vector<WatchedWorker> workers = workers_;
    lock.unlock();
    proto::HostResources resources = sampler_.sample(workers, clock.wall_ms());
    lock.lock();
    // Xids are events: none may be lost when a sample is replaced before the agent's beat.
    pending_xids_.insert(pending_xids_.end(), resources.xids.begin(), resources.xids.end());
    health_xids_.insert(health_xids_.end(), resources.xids.begin(), resources.xids.end());
    if (health_xids_.size() > kMaxHealthXids) {
      health_xids_.erase(health_xids_.begin(), health_xids_.end() - static_cast<std::ptrdiff_t>(kMaxHealthXids));
    }
    latest_ = std::move(resources);
    wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stopping_; });
  }
}

}  // namespace dtrain::agent
