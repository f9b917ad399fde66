#include "launcher/drill/drill_history.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain::drill {

using nlohmann::json;

std::string drill_history_path() { return dtrain_home() + "/drills.jsonl"; }

json history_entry(const DrillReport& report) {
  json faults = json::array();
  for (const FaultVerdict& fault : report.faults) {
    auto optional = [](const std::optional<int64_t>& value) { return value ? json(*value) : json(nullptr); };
    faults.push_back({{"fault", to_string(fault.injection.fault.kind)},
                      {"target", fault.injection.fault.target},
                      {"verdict", fault.passed() ? "pass" : "fail"},
                      {"detect_ms", optional(fault.detect_ms)},
                      {"recover_ms", optional(fault.recover_ms)},
                      {"steps_lost", optional(fault.steps_lost)}});
  }
  json full = to_json(report);
  json entry = {{"ts", format_timestamp_utc(report.finished_wall_ms)},
                {"drill_id", report.drill_id},
                {"mode", report.mode},
                {"run_id", report.run_id},
                {"verdict", report.verdict()},
                {"exit_code", to_int(report.exit_code())},
                {"faults", faults},
                {"missed", full["missed"]}};
  if (full.contains("report")) entry["report"] = full["report"];  // the run's HTML report (dtrain report)
  if (report.error) entry["error"] = *report.error;
  return entry;
}

Status append_drill_history(const std::string& path, const DrillReport& report) {
  if (Status made = make_directories(dtrain_home()); !made && path == drill_history_path()) return made;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return Error::infra(path + ": cannot open drill history: " + errno_text(errno));
  std::string text;
  if (::lseek(fd.get(), 0, SEEK_END) == 0) text = json_compact(json{{"dtrain_drills", kDrillHistoryVersion}}) + "\n";
  text += json_compact(history_entry(report)) + "\n";
  if (Status written = write_all(fd.get(), text); !written) return Error::infra(path + ": " + written.error().message);
  return {};
}

Result<std::vector<json>> read_drill_history(const std::string& path) {
  std::vector<json> entries;
  Result<std::string> text = read_file(path);
  if (!text) {
    if (::access(path.c_str(), F_OK) != 0) return entries;
    return Error::infra(path + ": " + text.error().message);
  }
  std::vector<std::string> lines = split(*text, '\n');
  bool header = true;
  for (const std::string& line : lines) {
    if (line.empty()) continue;
    json parsed = json::parse(line, nullptr, false);
    if (header) {
      header = false;
      auto version = json_int(parsed, "dtrain_drills");
      if (!version) return Error::infra(path + ":1: not a drill history (no {\"dtrain_drills\":1} header); move it aside");
      if (*version != kDrillHistoryVersion) {
        return Error::infra(path + ": drill history version " + std::to_string(*version) +
                            " is newer than this dtrain reads (" + std::to_string(kDrillHistoryVersion) +
                            "); upgrade dtrain");
      }
      continue;
    }
    if (parsed.is_object()) entries.push_back(std::move(parsed));
  }
  return entries;
}

namespace {

std::string ms_cell(const json& fault, const char* key) {
  auto value = json_int(fault, key);
  return value ? format_duration(Millis(*value)) : "-";
}

}  // namespace

std::string format_history(const std::vector<json>& entries) {
  if (entries.empty()) return "no drills yet; run one with `dtrain drill RUN --fault kill-rank:1` or `dtrain drill --spec drill.yaml`\n";
  std::string out;
  char row[512];
  std::snprintf(row, sizeof row, "%-20s %-6s %-36s %-22s %-8s %-9s %-9s %-6s %s\n", "TIME", "MODE", "RUN", "FAULT",
                "VERDICT", "DETECT", "RECOVER", "LOST", "MISSED");
  out += row;
  for (const json& entry : entries) {
    std::string time = json_string(entry, "ts");
    if (time.size() >= 19) time = time.substr(0, 10) + " " + time.substr(11, 8);
    std::string missed = "-";
    if (const json* list = json_member(entry, "missed"); list && list->is_array() && !list->empty()) {
      missed = (*list)[0].is_string() ? (*list)[0].get<std::string>() : "?";
      if (list->size() > 1) missed += " (+" + std::to_string(list->size() - 1) + " more)";
    }
    if (entry.contains("error") && entry["error"].is_string()) missed = "error: " + entry["error"].get<std::string>();
    const json* faults = json_member(entry, "faults");
    std::vector<json> rows;
    if (faults && faults->is_array()) rows.assign(faults->begin(), faults->end());
    if (rows.empty()) rows.push_back(json::object());
    bool first = true;
    for (const json& fault : rows) {
      std::string label = json_string(fault, "fault", "-");
      if (!json_string(fault, "target").empty()) label += ":" + json_string(fault, "target");
      auto lost = json_int(fault, "steps_lost");
      std::snprintf(row, sizeof row, "%-20s %-6s %-36s %-22s %-8s %-9s %-9s %-6s %s\n", first ? time.c_str() : "",
                    first ? json_string(entry, "mode").c_str() : "", first ? json_string(entry, "run_id").c_str() : "",
                    label.c_str(), json_string(fault, "verdict", json_string(entry, "verdict")).c_str(),
                    ms_cell(fault, "detect_ms").c_str(), ms_cell(fault, "recover_ms").c_str(),
                    lost ? std::to_string(*lost).c_str() : "-", first ? missed.c_str() : "");
      out += row;
      first = false;
    }
  }
  return out;
}

}  // namespace dtrain::drill
