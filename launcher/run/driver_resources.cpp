// Host resources from the agents' beats (beat.resources, messages.h): the newest per host for
// whoever reads the driver's state (metrics, status), GPU trouble as events at once (an Xid, an
// uncorrected ECC error), and metrics.jsonl lines at the spacing of the rank lines. At thousands
// of hosts one line per host per interval would be most of the file: past kMetricsDetailRanks
// hosts a line holds the spread over hosts and the hosts that stand out instead.

#include <algorithm>

#include "launcher/base/clock.h"
#include "launcher/base/events.h"
#include "launcher/run/driver.h"

namespace dtrain::run {

using nlohmann::json;

namespace {

json spread(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  return {{"min", values.front()}, {"median", values[values.size() / 2]}, {"max", values.back()}};
}

}  // namespace

void RunDriver::on_host_resources(AgentLink& link, const proto::HostResources& resources) {
  const std::string& host = link.host();
  for (const proto::XidEvent& xid : resources.xids) {
    record(events::GpuXid{host, xid.gpu, xid.xid}.to_json());
    recorder_.console_line("warning: " + host + " GPU " + std::to_string(xid.gpu) + ": Xid " + std::to_string(xid.xid) +
                           " (an NVIDIA driver error; see the Xid catalogue)");
  }
  auto previous = host_resources_.find(host);
  for (const proto::GpuResources& gpu : resources.gpus) {
    if (!gpu.ecc_uncorrected || previous == host_resources_.end()) continue;
    for (const proto::GpuResources& before : previous->second.gpus) {
      if (before.index != gpu.index || !before.ecc_uncorrected || *gpu.ecc_uncorrected <= *before.ecc_uncorrected) continue;
      record(events::GpuEccErrors{host, gpu.index, *gpu.ecc_uncorrected, *before.ecc_uncorrected}.to_json());
      recorder_.console_line("warning: " + host + " GPU " + std::to_string(gpu.index) + ": uncorrected ECC errors " +
                             std::to_string(*before.ecc_uncorrected) + " -> " + std::to_string(*gpu.ecc_uncorrected));
    }
  }
  proto::HostResources kept = resources;
  kept.xids.clear();
  host_resources_[host] = std::move(kept);
  write_resources_metrics();
}

void RunDriver::write_resources_metrics() {
  int64_t now = clock_.monotonic_ms();
  if (host_resources_.empty() || now - last_resources_metrics_ms_ < kResourcesMetricsSpacingMs) return;
  last_resources_metrics_ms_ = now;
  json line = {{"ts", format_timestamp_utc(clock_.wall_ms())}, {"gen", supervisor_.generation()}};
  if (host_resources_.size() <= kMetricsDetailRanks) {
    json hosts = json::array();
    for (const auto& [host, resources] : host_resources_) {
      json entry = proto::to_json(resources);
      entry.erase("xids");
      entry["host"] = host;
      hosts.push_back(std::move(entry));
    }
    line["hosts"] = std::move(hosts);
    recorder_.metrics(std::move(line));
    return;
  }
  std::vector<double> cpu, memory_used, gpu_utilization, gpu_memory_used, gpu_power, gpu_temperature;
  size_t gpus = 0;
  json standing_out = json::array();  // hosts with uncorrected ECC errors or GPU readings that failed
  for (const auto& [host, resources] : host_resources_) {
    if (resources.cpu_percent) cpu.push_back(*resources.cpu_percent);
    if (resources.memory_used_mb) memory_used.push_back(static_cast<double>(*resources.memory_used_mb));
    int64_t uncorrected = 0;
    gpus += resources.gpus.size();
    for (const proto::GpuResources& gpu : resources.gpus) {
      if (gpu.utilization_percent) gpu_utilization.push_back(*gpu.utilization_percent);
      if (gpu.memory_used_mb) gpu_memory_used.push_back(static_cast<double>(*gpu.memory_used_mb));
      if (gpu.power_w) gpu_power.push_back(*gpu.power_w);
      if (gpu.temperature_c) gpu_temperature.push_back(static_cast<double>(*gpu.temperature_c));
      uncorrected += gpu.ecc_uncorrected.value_or(0);
    }
    if ((uncorrected > 0 || resources.gpu_error) && standing_out.size() < kMetricsDetailRanks) {
      json entry = {{"host", host}, {"ecc_uncorrected", uncorrected}};
      if (resources.gpu_error) entry["gpu_error"] = *resources.gpu_error;
      standing_out.push_back(std::move(entry));
    }
  }
  line["hosts_reporting"] = host_resources_.size();
  line["host_cpu_percent"] = spread(cpu);
  line["host_memory_used_mb"] = spread(memory_used);
  line["gpus_reporting"] = gpus;
  line["gpu_utilization_percent"] = spread(gpu_utilization);
  line["gpu_memory_used_mb"] = spread(gpu_memory_used);
  line["gpu_power_w"] = spread(gpu_power);
  line["gpu_temperature_c"] = spread(gpu_temperature);
  line["hosts_standing_out"] = std::move(standing_out);
  recorder_.metrics(std::move(line));
}

}  // namespace dtrain::run
