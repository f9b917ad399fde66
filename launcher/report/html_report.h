#pragma once
// report.html: one self-contained page (inline CSS and SVG, no script, no network) that opens
// from disk. In order: the outcome and root cause; the run against its spec's intent (each
// recovery and the training time held to intent.recovery and target_duration); the plan and GPU topology per generation; a
// timeline of generations with every failure, detection, stop, re-plan, spawn, rendezvous and
// first step in host lanes; loss and step-time curves with fault markers; per-rank step time as
// a heat map; checkpoints; recovery phases as stacked bars; goodput; resources released.
// Everything taken from the run directory is HTML-escaped.

#include <cstddef>
#include <string>
#include <string_view>

#include "launcher/report/run_record.h"
#include "launcher/report/timeline.h"

namespace dtrain::report {

/// Text for HTML content and attribute values: & < > " ' escaped, invalid UTF-8 bytes and
/// control characters (other than newline and tab) replaced by U+FFFD.
std::string html_escape(std::string_view text);

/// The caps that keep the page small whatever the run's size.
struct ReportLimits {
  size_t lanes = 24;           ///< host lanes in the timeline (the rest share one lane)
  size_t curve_points = 300;   ///< buckets per curve
  size_t heat_rows = 64;       ///< rank blocks in the heat map
  size_t heat_columns = 120;   ///< time slices in the heat map
  size_t table_rows = 120;     ///< rows of a table (moments, recoveries, hosts)
  size_t checkpoint_rows = 20; ///< the newest checkpoints listed (every one is counted)
  size_t checkpoint_ticks = 400;  ///< checkpoint marks drawn on the timeline
};

std::string render_html(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits = {});

}  // namespace dtrain::report
