#pragma once
// The two kinds of drill, start to finish, as `dtrain drill` runs them:
//   - live: one fault against a run somebody else started;
//   - spec: start the job (a child `dtrain submit --detach`), inject each fault in order,
//     waiting for recovery between them, let the job finish, grade, clean up.
// Both log drill.verdict to the run and a line to the drill history.

#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/drill/drill_report.h"
#include "launcher/drill/fault.h"
#include "launcher/drill/grading.h"
#include "launcher/drill/live_drill.h"

namespace dtrain::drill {

struct LiveDrillPlan {
  std::string run;          ///< id or unique prefix
  Fault fault;
  Objectives objectives;
  Millis timeout{600'000};  ///< the whole drill: waiting to inject plus waiting for recovery
};

/// Errors (user) only when the drill cannot start: unknown, ended or supervisor-less run, a
/// fault that does not fit it. Anything later is in the report (error → exit 3).
Result<DrillReport> run_live_drill(const LiveDrillPlan& plan, const Say& say);

struct SpecDrillPlan {
  std::string drill_id;              ///< empty: a fresh make_drill_id()
  std::string dtrain_exe;            ///< this binary: the job is started with `<exe> submit --detach`
  std::string spec_path;             ///< the drill spec, for the report
  std::string job_path;              ///< the job spec to submit
  std::vector<std::string> sets;     ///< "key=value" overrides for the job
  std::vector<Fault> faults;
  Objectives objectives;
  Millis timeout{600'000};           ///< the whole drill, the job's run included
};

/// Runs the whole self-contained drill; never fails as a Result: problems are in the report.
DrillReport run_spec_drill(const SpecDrillPlan& plan, const Say& say);

/// A fresh "drill-YYYYMMDD-HHMMSS-xxxx".
std::string make_drill_id();

}  // namespace dtrain::drill
