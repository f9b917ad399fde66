#pragma once
// The parts report.html is made of (html_report.cpp puts them together): number and time
// formatting, the SVG pieces every chart shares (time scale, axis, marks), and one function per
// section of the page. Internal to launcher/report.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "launcher/events/event.h"
#include "launcher/metrics/step_split.h"
#include "launcher/report/html_report.h"
#include "launcher/report/run_record.h"
#include "launcher/report/timeline.h"

namespace dtrain::report::page {

// ---- formatting (html_parts.cpp)

std::string fixed(double value, int decimals);
/// Coordinates in SVG: one decimal is plenty and keeps big pages small.
std::string px(double value);
std::string number(double value);
std::string human_bytes(double bytes);
std::string human_ms(int64_t ms);
/// "+1m05s" from the run's start: times on the page are relative, the start is absolute.
std::string since(int64_t wall_ms, int64_t start_ms);
/// "0-7, 12, 14-15": ranks as ranges.
std::string ranges(std::vector<int> values);
/// html_escape, short: every text taken from the run directory goes through it.
std::string e(std::string_view text);

// ---- SVG pieces (html_parts.cpp)

// Mark colours and shapes, one per kind: the legend and the drawing use the same table.
struct MarkStyle {
  MarkKind kind;
  const char* color;
  const char* legend;
};
constexpr MarkStyle kMarkStyles[] = {
    {MarkKind::crash, "#d32f2f", "crash"},
    {MarkKind::hang, "#7b1fa2", "hang (where the silence began)"},
    {MarkKind::host_lost, "#212121", "host lost (where the silence began)"},
    {MarkKind::failure, "#e64a19", "other failure"},
    {MarkKind::detected, "#f57c00", "detected"},
    {MarkKind::stop, "#78909c", "stopped (workers gone)"},
    {MarkKind::replan, "#1565c0", "re-plan"},
    {MarkKind::spawn, "#2e7d32", "spawn"},
    {MarkKind::rendezvous, "#00838f", "rendezvous"},
    {MarkKind::first_step, "#43a047", "first step"},
    {MarkKind::checkpoint, "#9e9e9e", "checkpoint"},
    {MarkKind::drill, "#c2185b", "drill"},
    {MarkKind::finished, "#37474f", "run ended"},
};

const char* mark_color(MarkKind kind);
bool is_failure(MarkKind kind);
std::string mark_shape(MarkKind kind, double x, double y);
std::string legend_item(const std::string& color, const std::string& text);
/// A horizontal time axis over [start, end] at y, from x0 over `width` pixels.
std::string time_axis(int64_t start, int64_t end, double x0, double width, double y);

struct TimeScale {
  int64_t start = 0, end = 1;
  double x0 = 0, width = 1;
  double x(int64_t wall_ms) const {
    return x0 + static_cast<double>(wall_ms - start) / static_cast<double>(std::max<int64_t>(1, end - start)) * width;
  }
};

constexpr double kPageWidth = 1160;
constexpr double kLabelWidth = 150;

TimeScale page_scale(const Timeline& timeline);
const char* generation_color(int generation);

// ---- the run's events

/// The newest event that is a T, or nullptr.
template <class T>
const T* last_event(const RunRecord& record) {
  for (auto it = record.events.rbegin(); it != record.events.rend(); ++it) {
    if (const T* event = std::get_if<T>(&it->event)) return event;
  }
  return nullptr;
}

/// Every event that is a T, oldest first.
template <class T>
std::vector<const LoggedEvent*> events_of(const RunRecord& record) {
  std::vector<const LoggedEvent*> out;
  for (const LoggedEvent& event : record.events) {
    if (std::holds_alternative<T>(event.event)) out.push_back(&event);
  }
  return out;
}


// ---- sections, in page order

std::string outcome_section(const RunRecord& record, const Timeline& timeline);        // html_run_sections.cpp
/// The run against its spec's intent (intent_grades.h); one line when it states none.
std::string intent_section(const RunRecord& record, const ReportLimits& limits);        // html_intent_section.cpp
std::string plan_section(const RunRecord& record);                                     // html_run_sections.cpp
std::string timeline_section(const Timeline& timeline, const ReportLimits& limits);    // html_time_sections.cpp
std::string curves_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits);
std::string heat_map_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits);
std::string step_split_section(const RunRecord& record, const ReportLimits& limits);  // html_step_sections.cpp
/// The run's step split over metrics.jsonl (the outcome's summary row and the section).
metrics::StepSplit step_split_of(const RunRecord& record);
std::string checkpoints_section(const RunRecord& record, const Timeline& timeline,    // html_record_sections.cpp
                                const ReportLimits& limits);
std::string recovery_section(const Timeline& timeline, const ReportLimits& limits);
std::string goodput_section(const RunRecord& record, const Timeline& timeline);
std::string resources_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits);
std::string problems_section(const RunRecord& record);

}  // namespace dtrain::report::page
