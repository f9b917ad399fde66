#pragma once
// timeline.json: the run in Chrome's trace-event format, for Perfetto (ui.perfetto.dev, "Open
// trace file") and chrome://tracing. One process per host (pid), one thread per rank (tid);
// each worker process is a complete event ("ph":"X") from start to exit; the supervisor's own
// lane (pid 1) holds generations and recoveries with their phases; failures, detections and
// the rest are instant events ("ph":"i"). Times are µs since the run's first event.

#include <nlohmann/json.hpp>

#include "launcher/report/run_record.h"
#include "launcher/report/timeline.h"

namespace dtrain::report {

/// {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{"run_id":...,"start_ms":...}}
nlohmann::json chrome_trace(const RunRecord& record, const Timeline& timeline);

}  // namespace dtrain::report
