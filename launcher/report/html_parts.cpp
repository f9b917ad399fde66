// Formatting and the SVG pieces every section of report.html shares (html_parts.h).

#include "launcher/report/html_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"

namespace dtrain::report::page {

using nlohmann::json;

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

/// Coordinates in SVG: one decimal is plenty and keeps big pages small.
std::string px(double value) {
  if (!std::isfinite(value)) value = 0;
  return fixed(std::round(value * 10) / 10, std::fabs(value - std::round(value)) < 0.05 ? 0 : 1);
}

std::string number(double value) {
  char buffer[64];
  // Whole numbers past 10,000 (memory in MB, bytes) in full: "24105", not "2.41e+04".
  std::snprintf(buffer, sizeof buffer, std::fabs(value) >= 1e4 && std::fabs(value) < 1e15 ? "%.0f" : "%.4g", value);
  return buffer;
}

std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1000 && unit < 4) {
    bytes /= 1000;
    ++unit;
  }
  return (unit == 0 ? fixed(bytes, 0) : fixed(bytes, 1)) + " " + units[unit];
}

std::string human_ms(int64_t ms) { return format_duration(Millis(ms), DurationStyle::report); }

/// "+1m05s" from the run's start: times on the page are relative, the start is absolute.
std::string since(int64_t wall_ms, int64_t start_ms) { return "+" + human_ms(wall_ms - start_ms); }

/// "0-7, 12, 14-15": ranks as ranges.
std::string ranges(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(values[i]) : std::to_string(values[i]) + "-" + std::to_string(values[j]));
    i = j + 1;
  }
  return join(parts, ", ");
}

std::string e(std::string_view text) { return html_escape(text); }

const char* mark_color(MarkKind kind) {
  for (const MarkStyle& style : kMarkStyles) {
    if (style.kind == kind) return style.color;
  }
  return "#000";
}

bool is_failure(MarkKind kind) {
  return kind == MarkKind::crash || kind == MarkKind::hang || kind == MarkKind::host_lost || kind == MarkKind::failure;
}

/// The shape of a mark centred at (x, y).
std::string mark_shape(MarkKind kind, double x, double y) {
  std::string color = mark_color(kind);
  std::string X = px(x), Y = px(y);
  switch (kind) {
    case MarkKind::crash:
      return "<path d=\"M" + px(x - 5) + " " + px(y - 5) + "l10 10m0 -10l-10 10\" stroke=\"" + color +
             "\" stroke-width=\"2.5\"/>";
    case MarkKind::hang:
    case MarkKind::replan:
      return "<path d=\"M" + X + " " + px(y - 6) + "l6 6l-6 6l-6 -6z\" fill=\"" +
             (kind == MarkKind::hang ? color : std::string("#fff")) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>";
    case MarkKind::host_lost: return "<rect x=\"" + px(x - 5) + "\" y=\"" + px(y - 5) + "\" width=\"10\" height=\"10\" fill=\"" + color + "\"/>";
    case MarkKind::detected:
      return "<path d=\"M" + px(x - 5) + " " + px(y - 6) + "h10l-5 8z\" fill=\"" + color + "\"/>";
    case MarkKind::stop:
    case MarkKind::finished:
      return "<path d=\"M" + X + " " + px(y - 7) + "v14\" stroke=\"" + color + "\" stroke-width=\"3\"/>";
    case MarkKind::spawn:
      return "<path d=\"M" + px(x - 3) + " " + px(y - 5) + "l8 5l-8 5z\" fill=\"" + color + "\"/>";
    case MarkKind::checkpoint:
      return "<path d=\"M" + X + " " + px(y - 4) + "v8\" stroke=\"" + color + "\" stroke-width=\"1\"/>";
    case MarkKind::drill:
      return "<path d=\"M" + px(x + 1) + " " + px(y - 7) + "l-5 8h4l-1 6l5 -8h-4z\" fill=\"" + color + "\"/>";
    default:
      return "<circle cx=\"" + X + "\" cy=\"" + Y + "\" r=\"4.5\" fill=\"" + color + "\"/>";
  }
}

std::string legend_item(const std::string& color, const std::string& text) {
  return "<span><i style=\"background:" + color + "\"></i>" + e(text) + "</span>";
}

/// A horizontal time axis over [start, end] at y, from x0 over `width` pixels.
std::string time_axis(int64_t start, int64_t end, double x0, double width, double y) {
  double span = std::max<int64_t>(1, end - start);
  double step = 1;
  for (double candidate : {100., 200., 500., 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5,
                           72e5, 144e5, 216e5, 432e5, 864e5}) {
    step = candidate;
    if (span / candidate <= 10) break;
  }
  std::string out = "<path d=\"M" + px(x0) + " " + px(y) + "h" + px(width) + "\" stroke=\"#9aa3ad\"/>";
  for (double t = 0; t <= span + 1e-9; t += step) {
    double x = x0 + t / span * width;
    out += "<path d=\"M" + px(x) + " " + px(y) + "v4\" stroke=\"#9aa3ad\"/><text x=\"" + px(x) + "\" y=\"" +
           px(y + 15) + "\" text-anchor=\"middle\">+" + e(human_ms(static_cast<int64_t>(t))) + "</text>";
  }
  return out;
}

TimeScale page_scale(const Timeline& timeline) {
  return {timeline.start_ms, std::max(timeline.end_ms, timeline.start_ms + 1), kLabelWidth, kPageWidth - kLabelWidth - 16};
}

const char* generation_color(int generation) {
  static const char* palette[] = {"#cfe3f7", "#d8eed2", "#f3e0c9", "#e2d7f1", "#d3eeee", "#f4d4dc"};
  return palette[static_cast<size_t>(std::max(0, generation)) % 6];
}

}  // namespace dtrain::report::page
