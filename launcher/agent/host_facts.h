#pragma once
// What the supervisor learns about a host at hello (and records in hosts/<host>.json), and the
// host metrics that ride on every beat.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dtrain::agent {

/// {hostname, os, arch, cpus, memory_mb, gpus:[{index, name, uuid}], topology?}. GPUs come from
/// `nvidia-smi` when it is on PATH (each call bounded by `nvidia_smi_timeout_ms`; a hung or
/// failing nvidia-smi gives gpus [] and a line on stderr, never a stuck agent).
nlohmann::json collect_host_facts(int nvidia_smi_timeout_ms);

/// The first executable `program` in $PATH, or nullopt.
std::optional<std::string> find_on_path(const std::string& program);

/// The 1-minute load average, or -1 when /proc/loadavg is unreadable.
double load_average_1m();

/// MemAvailable from /proc/meminfo in MiB, or -1 when unreadable.
int64_t memory_available_mb();

/// One field of /proc/meminfo's text ("MemTotal:  131000000 kB") in MiB; nullopt when absent.
std::optional<int64_t> meminfo_field_mb(const std::string& meminfo, const std::string& key);

}  // namespace dtrain::agent
