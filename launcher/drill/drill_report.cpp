#include "launcher/drill/drill_report.h"

#include <cstdio>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/strings.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain::drill {

using nlohmann::json;

bool DrillReport::passed() const {
  if (error) return false;
  for (const FaultVerdict& fault : faults) {
    if (!fault.passed()) return false;
  }
  if (mode == "spec" && final_state != "succeeded") return false;
  return leftover_pids.empty() && !faults.empty();
}

namespace {

/// What the whole drill missed beyond its faults' own verdicts.
std::vector<std::string> drill_level_misses(const DrillReport& report) {
  std::vector<std::string> missed;
  if (report.error) return missed;
  if (report.mode == "spec" && report.final_state != "succeeded") {
    missed.push_back("the job did not succeed (final state " + report.final_state + ")");
  }
  if (!report.leftover_pids.empty()) {
    missed.push_back(std::to_string(report.leftover_pids.size()) + " process(es) of the run left behind, e.g. pid " +
                     std::to_string(report.leftover_pids.front()));
  }
  return missed;
}

}  // namespace

ExitCode DrillReport::exit_code() const {
  if (error) return error_is_usage ? ExitCode::usage : ExitCode::infra;
  return passed() ? ExitCode::ok : ExitCode::job_failed;
}

std::string DrillReport::verdict() const { return error ? "error" : passed() ? "pass" : "fail"; }

std::string report_path(const DrillReport& report) {
  return report.run_id.empty() ? "" : runs_root() + "/" + report.run_id + "/report.html";
}

json to_json(const DrillReport& report) {
  json faults = json::array();
  for (const FaultVerdict& fault : report.faults) faults.push_back(to_json(fault));
  json objectives = json::object();
  if (report.objectives.detect) objectives["detect"] = format_duration(*report.objectives.detect);
  if (report.objectives.recover) objectives["recover"] = format_duration(*report.objectives.recover);
  if (report.objectives.max_lost_steps) objectives["max_lost_steps"] = *report.objectives.max_lost_steps;
  if (report.objectives.max_lost_time) objectives["max_lost_time"] = format_duration(*report.objectives.max_lost_time);
  if (report.objectives.in_place) objectives["mode"] = "in-place";
  json from = json::object();
  if (report.objectives.detect) from["detect"] = to_string(ObjectiveSource::drill_spec);
  if (report.objectives.recover) from["recover"] = to_string(report.objectives.recover_from);
  if (report.objectives.max_lost_steps) from["max_lost_steps"] = to_string(report.objectives.lost_from);
  if (report.objectives.max_lost_time) from["max_lost_time"] = to_string(report.objectives.lost_from);
  if (report.objectives.in_place) from["mode"] = to_string(report.objectives.mode_from);
  if (!from.empty()) objectives["from"] = from;
  json missed = json::array();
  for (const FaultVerdict& fault : report.faults) {
    for (const std::string& what : fault.missed()) missed.push_back(fault.injection.fault.label() + ": " + what);
  }
  for (const std::string& what : drill_level_misses(report)) missed.push_back(what);
  json out = {{"drill_id", report.drill_id},
              {"mode", report.mode},
              {"run_id", report.run_id},
              {"started", format_timestamp_utc(report.started_wall_ms)},
              {"finished", format_timestamp_utc(report.finished_wall_ms)},
              {"verdict", report.verdict()},
              {"exit_code", to_int(report.exit_code())},
              {"objectives", objectives},
              {"faults", faults},
              {"final_state", report.final_state},
              {"missed", missed}};
  if (!report.spec_path.empty()) out["spec"] = report.spec_path;
  if (std::string report_file = report_path(report); !report_file.empty()) out["report"] = report_file;
  if (report.cleanup_checked) out["leftover_pids"] = report.leftover_pids;
  if (!report.objectives_note.empty()) out["objectives_note"] = report.objectives_note;
  if (report.error) out["error"] = *report.error;
  return out;
}

namespace {

std::string ms_text(const std::optional<int64_t>& ms) {
  return ms ? format_duration(Millis(*ms)) : std::string("never");
}

std::string time_of_day(int64_t wall_ms) {
  std::string stamp = format_timestamp_utc(wall_ms);  // 2026-11-29T23:40:01.123Z
  return stamp.size() >= 23 ? stamp.substr(11, 12) : stamp;
}

void line(std::string& out, const std::string& label, const std::string& value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "  %-17s", label.c_str());
  out += buffer + printable(value) + "\n";  // a detected kind or state may come from a worker's run
}

std::string phases_text(const json& phases) {
  std::string text;
  for (const auto& [key, label] : {std::pair{"kill_ms", "kill"}, {"abort_ms", "abort"}, {"stop_ms", "stop"},
                                    {"replan_ms", "replan"}, {"spawn_ms", "spawn"}, {"rendezvous_ms", "rendezvous"},
                                    {"state_and_first_step_ms", "state + first step"}, {"first_step_ms", "first step"}}) {
    if (auto value = json_int(phases, key)) {
      text += (text.empty() ? "" : " · ") + std::string(label) + " " + format_duration(Millis(*value));
    }
  }
  return text;
}

void format_fault(std::string& out, const FaultVerdict& verdict) {
  const Injection& injection = verdict.injection;
  out += "fault " + injection.fault.label() + ": " + (verdict.passed() ? "PASS" : "FAIL") + "\n";
  std::string what = injection.pid > 0 ? "pid " + std::to_string(injection.pid) + ", " : "";
  if (injection.fault.kind == FaultKind::slow_storage) what = "checkpoint writes delayed " + format_duration(injection.fault.delay) + ", ";
  line(out, "injected", time_of_day(injection.wall_ms) + " (" + what + "step " + std::to_string(injection.at_step) +
                            ", generation " + std::to_string(injection.generation) + ")");
  if (injection.corrupted_step) {
    line(out, "corrupted", "step " + std::to_string(*injection.corrupted_step) + ": " + injection.corrupted_file);
  }
  if (injection.fault.kind != FaultKind::slow_storage || verdict.detected_wall_ms) {
    std::string by = verdict.detected_kind.empty() ? "" : " by " + verdict.detected_kind;
    if (verdict.detected_rank) by += " (rank " + std::to_string(*verdict.detected_rank) + ")";
    line(out, "detected", verdict.detect_ms ? "+" + ms_text(verdict.detect_ms) + by : verdict.detected_wall_ms ? by : "never");
  }
  if (injection.fault.kind != FaultKind::slow_storage) {
    std::string phases = phases_text(verdict.phases);
    line(out, "recovered", verdict.recover_ms ? "+" + ms_text(verdict.recover_ms) + (phases.empty() ? "" : " (" + phases + ")")
                                              : "never");
  }
  if (verdict.steps_lost) {
    std::string detail;
    if (verdict.resume_step) detail = " (resumed from step " + std::to_string(*verdict.resume_step);
    if (verdict.last_step && verdict.resume_step) detail += ", last step " + std::to_string(*verdict.last_step);
    if (!detail.empty()) detail += ")";
    line(out, "steps lost", std::to_string(*verdict.steps_lost) + detail);
  }
  line(out, "final state", verdict.final_state.empty() ? "unknown" : verdict.final_state);
  if (!verdict.objectives.empty()) {
    char header[96];
    std::snprintf(header, sizeof header, "  %-17s%-10s%-10s%-8s%s\n", "OBJECTIVE", "LIMIT", "MEASURED", "RESULT", "FROM");
    out += header;
    for (const ObjectiveResult& objective : verdict.objectives) {
      char row[200];
      std::snprintf(row, sizeof row, "  %-17s%-10s%-10s%-8s%s\n", objective.name.c_str(), objective.limit.c_str(),
                    objective.measured.c_str(), objective.met ? "met" : "MISSED", to_string(objective.source));
      out += row;
    }
  }
  for (const CheckResult& result : verdict.checks) {
    out += std::string("  [") + (result.met ? "ok" : "!!") + "] " + result.name + ": " + printable(result.detail) + "\n";
  }
}

}  // namespace

std::string format_report(const DrillReport& report) {
  std::string out = "drill " + report.drill_id + (report.run_id.empty() ? "" : " · run " + report.run_id) + " · " +
                    report.mode + "\n";
  for (const FaultVerdict& fault : report.faults) {
    out += "\n";
    format_fault(out, fault);
  }
  bool job_line = report.mode == "spec" && !report.error;
  if (job_line) out += "\njob: " + printable(report.final_state) + "\n";
  if (report.cleanup_checked) {
    std::string cleanup = report.leftover_pids.empty()
                              ? "no process of the run remains"
                              : std::to_string(report.leftover_pids.size()) + " process(es) of the run remained (killed), e.g. pid " +
                                    std::to_string(report.leftover_pids.front());
    out += (job_line ? "" : "\n") + std::string("cleanup: ") + cleanup + "\n";
  }
  if (!report.objectives_note.empty()) out += "\nobjectives: " + printable(report.objectives_note) + "\n";
  if (report.error) out += "\nthe drill could not run: " + printable(*report.error) + "\n";
  if (std::string report_file = report_path(report); !report_file.empty()) out += "\nreport: " + report_file + "\n";
  out += "\nverdict: " + std::string(report.error ? "ERROR" : report.passed() ? "PASS" : "FAIL");
  if (!report.error && !report.passed()) {
    std::string missed;
    for (const FaultVerdict& fault : report.faults) {
      for (const std::string& what : fault.missed()) missed += "\n  missed: " + fault.injection.fault.label() + ": " + printable(what);
    }
    for (const std::string& what : drill_level_misses(report)) missed += "\n  missed: " + printable(what);
    out += missed;
  }
  return out + "\n";
}

}  // namespace dtrain::drill
