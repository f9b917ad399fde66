#include "launcher/registry/registry_step_times.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "launcher/base/duration.h"
#include "launcher/registry/statement.h"

namespace dtrain::registry {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

std::string ms_text(double ms) { return format_duration(Millis(std::llround(ms)), DurationStyle::exact); }

}  // namespace

Result<std::vector<EarlierRun>> earlier_runs(RegistryDb& db, const std::string& job_name, int limit) {
  // A run's world size: the units of its first generation's allocations (one row a host).
  Statement select(db.handle(),
                   "SELECT r.id, r.run_dir, r.state, r.submitted_ms, "
                   "COALESCE((SELECT SUM(a.units) FROM allocations a WHERE a.run_id = r.id AND a.generation = "
                   "(SELECT MIN(b.generation) FROM allocations b WHERE b.run_id = r.id)), 0) "
                   "FROM runs r WHERE r.name = ?1 AND r.started_ms IS NOT NULL ORDER BY r.submitted_ms DESC, r.id DESC LIMIT ?2");
  if (!select.ok()) return db.error_of("cannot read the earlier runs of job '" + job_name + "'");
  select.bind(1, job_name).bind(2, limit);
  std::vector<EarlierRun> runs;
  for (;;) {
    int stepped = select.step();
    if (stepped == SQLITE_DONE) break;
    if (stepped != SQLITE_ROW) return db.error_of("cannot read the earlier runs of job '" + job_name + "'");
    runs.push_back({select.column_text(0), select.column_text(1), select.column_text(2),
                    static_cast<int>(select.column_int64(4)), select.column_int64(3)});
  }
  return runs;
}

Result<JobStepTime> job_step_time(RegistryDb& db, const std::string& job_name, int world_size,
                                  const StepTimeOfRun& step_time_of_run, int limit) {
  // Read more runs than are used: some have no step time (failed at launch, metrics rotated away).
  Result<std::vector<EarlierRun>> runs = earlier_runs(db, job_name, limit * 4);
  if (!runs) return runs.error();
  JobStepTime result;
  std::vector<JobStepTime::Measured> all, same;
  for (const EarlierRun& run : *runs) {
    std::optional<double> step_ms = step_time_of_run ? step_time_of_run(run.run_dir) : std::nullopt;
    if (!step_ms || !std::isfinite(*step_ms) || *step_ms <= 0) continue;
    if (static_cast<int>(all.size()) < limit) all.push_back({run, *step_ms});
    if (run.world_size == world_size && static_cast<int>(same.size()) < limit) same.push_back({run, *step_ms});
  }
  if (all.empty()) {
    result.source = runs->empty()
                        ? "the registry has no earlier run of job '" + job_name +
                              "'; run it once (even briefly: dtrain submit, then dtrain stop) and the measured step time "
                              "will be used, or give --step-time"
                        : "none of the " + std::to_string(runs->size()) + " earlier run(s) of job '" + job_name +
                              "' recorded a step time (metrics.jsonl step_ms); let a run train a few steps, or give --step-time";
    return result;
  }
  result.same_world_size = !same.empty();
  result.runs = result.same_world_size ? same : all;
  std::vector<double> values;
  std::string each;
  for (const JobStepTime::Measured& measured : result.runs) {
    values.push_back(measured.step_ms);
    each += (each.empty() ? "" : ", ") + measured.run.run_id + " " + ms_text(measured.step_ms);
  }
  result.median_step_ms = median(values);
  result.source = "median of " + std::to_string(result.runs.size()) + " earlier run(s) of '" + job_name + "' " +
                  (result.same_world_size ? "at world size " + std::to_string(world_size)
                                          : "at other world sizes (none at " + std::to_string(world_size) + ")") +
                  " in the registry (" + each + "; each the median step_ms of its metrics.jsonl)";
  return result;
}

}  // namespace dtrain::registry
