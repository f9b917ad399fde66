// build_review (review_builder.h): the runs in scope, what their directories say, and the
// decision drawn from it. The registry-wide parts (capacity, owners, quarantine, audit) are in
// review_registry_parts.cpp.

#include "launcher/review/review_builder.h"

#include <algorithm>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/drill/drill_history.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/registry/registry_review.h"
#include "launcher/review/review_rules.h"
#include "launcher/review/run_evidence.h"

namespace dtrain::review {
namespace {

constexpr double kMsPerHour = 3600.0 * 1000;

/// One run in scope with what its directory says.
struct ScopedRun {
  registry::HistoryRow history;
  RunEvidence evidence;
  std::vector<registry::AllocationRow> allocations;
};

std::string tenant_name(const std::string& tenant) { return tenant.empty() ? "(none)" : tenant; }

bool on_hosts(const std::vector<registry::AllocationRow>& allocations, const std::vector<std::string>& hosts) {
  for (const registry::AllocationRow& allocation : allocations) {
    if (std::find(hosts.begin(), hosts.end(), allocation.host) != hosts.end()) return true;
  }
  return false;
}

/// The runs submitted in the period (of the tenant), with their allocations; on the hosts when given.
Result<std::vector<ScopedRun>> runs_in_scope(registry::RegistryDb& db, const ReviewRequest& request) {
  registry::HistoryQuery query;
  if (!request.scope.tenant.empty()) query.tenant = request.scope.tenant;
  query.since_ms = request.scope.since_ms;
  query.until_ms = request.scope.until_ms;
  query.limit = 0;
  query.now_ms = request.now_ms;
  Result<registry::HistoryPage> page = registry::history(db, query);
  if (!page) return page.error();
  std::vector<std::string> ids;
  for (const registry::HistoryRow& row : page->rows) ids.push_back(row.run.id);
  Result<std::vector<registry::AllocationRow>> allocations = registry::allocations_of_runs(db, ids);
  if (!allocations) return allocations.error();
  std::map<std::string, std::vector<registry::AllocationRow>> by_run;
  for (registry::AllocationRow& allocation : *allocations) by_run[allocation.run_id].push_back(std::move(allocation));
  std::vector<ScopedRun> runs;
  // Oldest first: the order things happened, on the page as in the JSON.
  for (auto it = page->rows.rbegin(); it != page->rows.rend(); ++it) {
    std::vector<registry::AllocationRow>& held = by_run[it->run.id];
    if (!request.scope.hosts.empty() && !on_hosts(held, request.scope.hosts)) continue;
    runs.push_back({*it, {}, std::move(held)});
  }
  return runs;
}

/// One drills.jsonl entry as a DrillGrade; none when it is not a drill line (no time, no id).
std::optional<DrillGrade> drill_entry(const nlohmann::json& entry) {
  DrillGrade drill = drill_grade_of(entry, json_string(entry, "ts"));
  if (!parse_timestamp_utc(drill.at) || drill.drill_id.empty()) return std::nullopt;
  drill.from = "drills.jsonl";
  return drill;
}

/// Every drill that finished in the period: drills.jsonl, and the drill.verdict events of the
/// runs (one per drill id; the event adds the leftover processes the history line lacks). With
/// --tenant or --hosts, only drills of runs in scope.
void collect_drills(const ReviewRequest& request, std::vector<ScopedRun>& runs, Review& review) {
  std::map<std::string, std::string> tenant_of;
  std::map<std::string, const DrillGrade*> from_events;
  for (const ScopedRun& run : runs) {
    tenant_of[run.history.run.id] = run.history.run.tenant;
    for (const DrillGrade& drill : run.evidence.drills) from_events[drill.drill_id] = &drill;
  }
  bool filtered = !request.scope.tenant.empty() || !request.scope.hosts.empty();
  auto in_scope = [&](const DrillGrade& drill) {
    std::optional<int64_t> at = parse_timestamp_utc(drill.at);
    if (!at || *at < request.scope.since_ms || *at >= request.scope.until_ms) return false;
    return !filtered || tenant_of.count(drill.run_id) > 0;
  };
  std::set<std::string> seen;
  Result<std::vector<nlohmann::json>> history = drill::read_drill_history(request.drill_history_path);
  if (!history) review.problems.push_back(history.error().message);
  for (const nlohmann::json& entry : history ? *history : std::vector<nlohmann::json>{}) {
    std::optional<DrillGrade> drill = drill_entry(entry);
    if (!drill) {
      ++review.skipped_lines;
      continue;
    }
    if (!in_scope(*drill) || !seen.insert(drill->drill_id).second) continue;
    drill->tenant = tenant_of.count(drill->run_id) ? tenant_of[drill->run_id] : "";
    if (auto event = from_events.find(drill->drill_id); event != from_events.end()) {
      drill->leftover_processes = event->second->leftover_processes;
    }
    review.validation.drills.push_back(std::move(*drill));
  }
  for (const ScopedRun& run : runs) {
    for (const DrillGrade& drill : run.evidence.drills) {
      if (in_scope(drill) && seen.insert(drill.drill_id).second) review.validation.drills.push_back(drill);
    }
  }
  std::stable_sort(review.validation.drills.begin(), review.validation.drills.end(),
                   [](const DrillGrade& a, const DrillGrade& b) { return a.at < b.at; });
}

/// Hosts used, GPU-hours (clipped to the period), runs by state, top root-cause failures.
void fill_current(const ReviewRequest& request, const std::vector<ScopedRun>& runs,
                  const std::vector<registry::FailureRow>& failures, Review& review) {
  CurrentState& current = review.current;
  std::map<std::string, HostUse> hosts;
  std::map<std::string, std::set<std::string>> runs_on_host;
  std::set<std::string> tenants;
  for (const ScopedRun& run : runs) {
    ++current.runs;
    ++current.runs_by_state[run.history.run.state.empty() ? "unknown" : run.history.run.state];
    tenants.insert(run.history.run.tenant);
    for (const registry::AllocationRow& allocation : run.allocations) {
      HostUse& host = hosts[allocation.host];
      host.host = allocation.host;
      host.resource = allocation.resource;
      host.units = std::max(host.units, allocation.units);
      int64_t start = std::max(allocation.start_ms, request.scope.since_ms);
      int64_t end = std::min(allocation.end_ms.value_or(request.now_ms), request.scope.until_ms);
      double hours = end > start ? static_cast<double>(end - start) / kMsPerHour * allocation.units : 0;
      host.unit_hours += hours;
      (allocation.resource == "gpu" ? current.gpu_hours : current.slot_hours) += hours;
      runs_on_host[allocation.host].insert(allocation.run_id);
    }
  }
  std::map<std::string, std::map<std::string, int>> cause_hosts;  // kind → host → root causes
  for (const registry::FailureRow& failure : failures) {
    auto host = hosts.find(failure.host);
    if (host != hosts.end()) {
      ++host->second.failures;
      host->second.root_cause_failures += failure.root_cause ? 1 : 0;
    }
    if (failure.root_cause) ++cause_hosts[failure.kind][failure.host.empty() ? "(no host)" : failure.host];
  }
  for (auto& [name, host] : hosts) {
    host.runs = static_cast<int>(runs_on_host[name].size());
    (host.resource == "gpu" ? current.gpus : current.slots) += host.units;
    current.hosts_used.push_back(host);
  }
  current.hosts = static_cast<int>(hosts.size());
  current.tenants = static_cast<int>(tenants.size());
  for (const auto& [kind, by_host] : cause_hosts) {
    FailureCauseCount cause{kind, 0, {}};
    std::vector<std::pair<int, std::string>> ranked;
    for (const auto& [host, count] : by_host) {
      cause.count += count;
      ranked.emplace_back(-count, host);
    }
    std::sort(ranked.begin(), ranked.end());
    for (const auto& [negative, host] : ranked) cause.hosts.push_back(host + " ×" + std::to_string(-negative));
    current.top_failure_causes.push_back(std::move(cause));
  }
  std::stable_sort(current.top_failure_causes.begin(), current.top_failure_causes.end(),
                   [](const FailureCauseCount& a, const FailureCauseCount& b) { return a.count > b.count; });
  if (current.top_failure_causes.size() > 5) current.top_failure_causes.resize(5);
}

void fill_validation(std::vector<ScopedRun>& runs, Review& review) {
  Validation& validation = review.validation;
  for (ScopedRun& run : runs) {
    RunEvidence& evidence = run.evidence;
    validation.failures.insert(validation.failures.end(), evidence.failures.begin(), evidence.failures.end());
    validation.recoveries.insert(validation.recoveries.end(), evidence.recoveries.begin(), evidence.recoveries.end());
    validation.releases.insert(validation.releases.end(), evidence.releases.begin(), evidence.releases.end());
    if (evidence.checkpoints.checkpoints > 0 || evidence.checkpoints.rejected > 0) {
      validation.checkpoints.push_back(evidence.checkpoints);
    }
  }
  for (const ReleaseRecord& release : validation.releases) {
    validation.leftovers += release.unconfirmed || release.remaining > 0 ? 1 : 0;
  }
  for (const DrillGrade& drill : validation.drills) validation.leftovers += drill.leftover_processes > 0 ? 1 : 0;
}

/// The leftovers of a tenant's runs and drills, one line each.
std::vector<std::string> leftovers_of(const std::string& tenant, const Validation& validation) {
  std::vector<std::string> lines;
  for (const ReleaseRecord& release : validation.releases) {
    if (release.tenant != tenant) continue;
    if (release.unconfirmed) {
      lines.push_back("run " + release.run_id + ": " + release.host + " never confirmed its release (" + release.detail + ")");
    } else if (release.remaining > 0) {
      lines.push_back("run " + release.run_id + ": " + std::to_string(release.remaining) + " processes left on " +
                      release.host + " after gen " + std::to_string(release.generation));
    }
  }
  for (const DrillGrade& drill : validation.drills) {
    if (drill.tenant == tenant && drill.leftover_processes > 0) {
      lines.push_back("drill " + drill.drill_id + ": " + std::to_string(drill.leftover_processes) +
                      " processes of run " + drill.run_id + " still alive at its end");
    }
  }
  return lines;
}

void fill_decision(const std::vector<ScopedRun>& runs, Review& review) {
  Decision& decision = review.decision;
  decision.rules = rules();
  std::map<std::string, TenantEvidence> tenants;
  std::map<std::string, std::vector<int64_t>> submitted;
  std::vector<int64_t> all_submitted;
  for (const ScopedRun& run : runs) {
    const registry::RunRow& row = run.history.run;
    RunOutcome outcome{run.evidence.recoveries, run.history.duration_ms, run.evidence.finished, run.evidence.step_ms};
    RunObjectives objectives{row.id, row.tenant, row.name, run.evidence.intent.given,
                             evaluate_objectives(run.evidence.intent, outcome)};
    TenantEvidence& tenant = tenants[row.tenant];
    tenant.tenant = row.tenant;
    ++tenant.runs;
    tenant.runs_with_intent += objectives.intent_given ? 1 : 0;
    for (const ObjectiveResult& result : objectives.objectives) {
      if (result.status == kMissed) {
        tenant.missed_objectives.push_back("run " + row.id + ": " + result.objective + " " + result.wanted + " (" +
                                           result.evidence + ")");
      }
    }
    submitted[row.tenant].push_back(row.submitted_ms);
    all_submitted.push_back(row.submitted_ms);
    decision.runs.push_back(std::move(objectives));
  }
  for (const DrillGrade& drill : review.validation.drills) {
    auto tenant = tenants.find(drill.tenant);
    if (tenant == tenants.end()) continue;  // a drill of a run outside the scope
    if (drill.verdict == "pass" && drill.leftover_processes == 0) {
      ++tenant->second.drills_passed;
    } else if (drill.verdict != "pass") {
      std::string missed = drill.missed.empty() ? "" : " (" + join(drill.missed, "; ") + ")";
      tenant->second.failed_drills.push_back(drill.drill_id + " on run " + drill.run_id + ": " + drill.verdict + missed);
    }
  }
  for (auto& [name, evidence] : tenants) {
    evidence.data = pilot_data(submitted[name]);
    evidence.leftovers = leftovers_of(name, review.validation);
    decision.tenants.push_back(decide_tenant(evidence));
  }
  decision.data = pilot_data(all_submitted);
}

std::string scope_text(const Scope& scope) {
  std::string text = scope.since + " to " + scope.until;
  if (!scope.tenant.empty()) text += ", tenant " + scope.tenant;
  if (!scope.hosts.empty()) text += ", hosts " + join(scope.hosts, ",");
  return text;
}

void fill_sources(Review& review, size_t runs) {
  std::string n = std::to_string(runs) + " runs in scope";
  review.sources = {
      {"hosts", review.registry + ": allocations of the " + n + " (hours clipped to the period); busy % from every "
                "run on those hosts, whatever its tenant"},
      {"runs", review.registry + ": runs table, the " + n + " (submitted in the period)"},
      {"failure-causes", review.registry + ": failures table, the root-cause failures of the " + n},
      {"drills", review.drill_history + " and the drill.verdict events of the runs' events.jsonl, drills finished in "
                 "the period"},
      {"failures", "events.jsonl of the " + n + " (failure.detected); samples from the failure's traceback, its "
                   "rank's worker.exit event, or ranks/<rank>.log while the run directory exists"},
      {"recoveries", "events.jsonl of the " + n + " (recovery.completed and its phases)"},
      {"checkpoints", "events.jsonl of the " + n + " (checkpoint.committed, checkpoint.rejected); restore is the "
                      "recoveries' first-step phase (load and first step)"},
      {"releases", "events.jsonl of the " + n + " (resources.released, resources.unconfirmed) and the drills' "
                   "leftover processes"},
      {"objectives", "spec.yaml (intent:) and events.jsonl of each of the " + n + "; durations from " + review.registry},
      {"pilot-data", review.registry + ": runs table, submitted times of the " + n},
      {"verdicts", "the sections above, by the rules stated here (man dtrain-review)"},
      {"owners", review.registry + ": usage by tenant and by user (allocations clipped to the period; --hosts not "
                 "applied)"},
      {"capacity", review.registry + ": capacity per host and UTC day of the hosts used, in 7-day buckets; hosts "
                   "standing out: root-cause failures per 1,000 unit-hours over 2x the median"},
      {"quarantine", review.registry + ": quarantine table, rows overlapping the period (of the hosts, when given)"},
      {"audit", review.registry + ": audit table in the period: over-quota starts, hosts quarantine and release, "
                "registry rebuild (--tenant and --hosts not applied)"},
  };
}

std::string summary_of(const Review& review) {
  if (review.no_runs) return "no runs in this period (" + scope_text(review.scope) + ")";
  std::string text = std::to_string(review.current.runs) + " runs of " + std::to_string(review.current.tenants) +
                     " tenants, " + scope_text(review.scope) + ":";
  for (const TenantVerdict& tenant : review.decision.tenants) text += " " + tenant_name(tenant.tenant) + " " + tenant.verdict + ";";
  if (text.back() == ';') text.pop_back();
  return text;
}

}  // namespace

Result<Review> build_review(registry::RegistryDb& db, const ReviewRequest& request) {
  Review review;
  review.generated = format_timestamp_utc(request.now_ms);
  review.dtrain_version = kVersion;
  review.scope = request.scope;
  review.scope.since = format_timestamp_utc(request.scope.since_ms);
  review.scope.until = format_timestamp_utc(request.scope.until_ms);
  review.registry = db.path();
  review.drill_history = request.drill_history_path;
  Result<std::vector<ScopedRun>> runs = runs_in_scope(db, request);
  if (!runs) return runs.error();
  std::vector<std::string> ids;
  for (ScopedRun& run : *runs) {
    ids.push_back(run.history.run.id);
    run.evidence = read_run_evidence(run.history.run);
    review.skipped_lines += run.evidence.skipped_lines;
    review.problems.insert(review.problems.end(), run.evidence.problems.begin(), run.evidence.problems.end());
  }
  Result<std::vector<registry::FailureRow>> failures = registry::failures_of_runs(db, ids);
  if (!failures) return failures.error();
  review.no_runs = runs->empty();
  collect_drills(request, *runs, review);
  fill_current(request, *runs, *failures, review);
  fill_validation(*runs, review);
  fill_decision(*runs, review);
  if (Status filled = fill_capacity(db, request, review); !filled) return filled.error();
  if (Status filled = fill_operations(db, request, review); !filled) return filled.error();
  fill_sources(review, runs->size());
  review.summary = summary_of(review);
  return review;
}

}  // namespace dtrain::review
