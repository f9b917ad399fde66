// health: (issue 29) — which checks each agent makes of its host, the site's own check command
// and its diagnostics, and when a host is quarantined. Sizes read as people write them (512MB,
// 1GiB); times as durations (30s, 24h, 7d is written 168h).

#include "launcher/spec/spec_sections.h"

namespace dtrain::spec {
namespace {

/// A size in MiB ("512MB", "1GiB", "0" for none allowed); none on a problem (reported).
std::optional<uint64_t> read_megabytes(DiagnosticSink& sink, const YAML::Node* node, const std::string& key) {
  if (node == nullptr) return std::nullopt;
  std::optional<double> bytes = node->IsScalar() ? parse_byte_size(node->Scalar()) : std::nullopt;
  if (!bytes || *bytes < 0 || *bytes > 1e18) {
    sink.error(*node, key, "expected a size such as 512MB, 2GiB or 0, got " +
                               (node->IsScalar() ? single_quoted(node->Scalar()) : describe(*node)));
    return std::nullopt;
  }
  return static_cast<uint64_t>(*bytes / 1048576.0 + 0.5);
}

/// A shell command line: a non-empty string (a list would hide how it is quoted).
void read_command(DiagnosticSink& sink, const YAML::Node* node, const std::string& key, std::string& out) {
  if (node == nullptr) return;
  if (!node->IsScalar() || node->Scalar().empty()) {
    sink.error(*node, key, "expected a command line (run with sh -c on each host), such as \"/usr/sbin/nhc\" or "
                           "\"dcgmi diag -r 1\", got " + describe(*node));
    return;
  }
  out = node->Scalar();
}

}  // namespace

void read_health(DiagnosticSink& sink, const Section& root, HealthSettings& health) {
  Section h(sink, root.get("health"), "health",
            {"enabled", "command", "command_timeout", "diagnose", "diagnose_timeout", "leftover_gpu_memory",
             "reclaim_wait", "write_timeout", "min_free", "quarantine"});
  if (auto v = read_choice(sink, h.get("enabled"), h.path("enabled"), {"on", "off", "true", "false"})) {
    health.enabled = *v == "on" || *v == "true";
  }
  read_command(sink, h.get("command"), h.path("command"), health.command);
  read_command(sink, h.get("diagnose"), h.path("diagnose"), health.diagnose);
  if (auto v = read_duration(sink, h.get("command_timeout"), h.path("command_timeout"), Millis(100))) health.command_timeout = *v;
  if (auto v = read_duration(sink, h.get("diagnose_timeout"), h.path("diagnose_timeout"), Millis(100))) health.diagnose_timeout = *v;
  if (auto v = read_duration(sink, h.get("reclaim_wait"), h.path("reclaim_wait"), Millis(0))) health.reclaim_wait = *v;
  if (auto v = read_duration(sink, h.get("write_timeout"), h.path("write_timeout"), Millis(100))) health.write_timeout = *v;
  if (auto v = read_megabytes(sink, h.get("leftover_gpu_memory"), h.path("leftover_gpu_memory"))) health.leftover_gpu_memory_mb = *v;
  if (auto v = read_megabytes(sink, h.get("min_free"), h.path("min_free"))) health.min_free_mb = *v;
  Section q(sink, h.get("quarantine"), h.path("quarantine"), {"after", "window", "for"});
  if (auto v = read_int(sink, q.get("after"), q.path("after"), 0, 1000)) health.quarantine_after = *v;
  if (auto v = read_duration(sink, q.get("window"), q.path("window"), Millis(1000))) health.quarantine_window = *v;
  if (auto v = read_duration(sink, q.get("for"), q.path("for"), Millis(1000))) health.quarantine_duration = *v;
}

}  // namespace dtrain::spec
