// Health gates (issue 29; spec `health:`): a host whose agent finds it unhealthy is not used.
// Three moments: the `start` checks every agent runs after hello (the first generation waits for
// each planned host's), before a re-rendezvous takes a host in (a spare, a rejoined host: join),
// and after a failure blamed on a host that the next generation keeps (after failure, with the
// site's diagnose command). An in-place recovery (elastic.in_place) waits for the same answers
// before it starts a replacement, and falls back to a restart without a host that fails. A failed
// check leaves the host out — a spare takes its place or the
// job shrinks, as for a lost host — and quarantines it (host.quarantined: the registry keeps it
// out of later runs). A warning lets it in; so does an agent that does not answer within the
// checks' own limits (fail open, said in host.health as "unchecked").

#include <algorithm>

#include "launcher/base/duration.h"
#include "launcher/base/strings.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::supervisor {

namespace {

using events::HealthCheckResult;
using events::HostHealth;

/// The hosts of `plan`, by name.
std::set<std::string> hosts_of(const plan::RankPlan& plan) {
  std::set<std::string> hosts;
  for (const plan::PlanHost& host : plan.hosts) hosts.insert(host.entry.name);
  return hosts;
}

/// Whether `plan` has `host`: a scan, not a set made per call (once per host's health report,
/// building the set made the start quadratic in allocations: 18 % of the loop at 8,192 hosts).
bool in_plan(const plan::RankPlan& plan, const std::string& host) {
  return std::any_of(plan.hosts.begin(), plan.hosts.end(), [&](const plan::PlanHost& entry) { return entry.entry.name == host; });
}

}  // namespace

Millis Supervisor::health_deadline(bool diagnose) const {
  // The agent bounds every check itself; this is the supervisor's own limit past them all.
  const spec::HealthSettings& health = spec_.health;
  Millis limit = health.write_timeout + health.reclaim_wait + Millis(10'000);
  if (!health.command.empty()) limit += health.command_timeout;
  if (diagnose && !health.diagnose.empty()) limit += health.diagnose_timeout;
  return limit;
}

void Supervisor::health_at_connect(const HostConnected& event) {
  if (!event.health_requested) return;
  health_checked_hosts_.insert(event.host);
  awaiting_health_[event.host] = clock_.monotonic_ms();
}

bool Supervisor::awaiting_start_health(const std::string& host) const { return awaiting_health_.count(host) > 0; }

const HostHealth& Supervisor::note_health(HostHealth health, const std::string& action, const std::string& detail) {
  health.action = action;
  health.detail = detail;
  record(health.to_json());
  if (health.verdict == HealthCheckResult::kFail) {
    std::vector<std::string> evidence;
    for (const HealthCheckResult& check : health.checks) {
      if (check.verdict == HealthCheckResult::kFail) evidence.push_back(check.name + ": " + check.message);
    }
    quarantine(health.host, "failed its health check (" + health.moment + ")", std::move(evidence));
  }
  std::string host = health.host;
  host_health_[host] = std::move(health);
  return host_health_[host];
}

void Supervisor::quarantine(const std::string& host, const std::string& reason, std::vector<std::string> evidence) {
  if (host.empty() || std::find(quarantined_.begin(), quarantined_.end(), host) != quarantined_.end()) return;
  quarantined_.push_back(host);
  record(events::HostQuarantined{host, reason, std::move(evidence), spec_.health.quarantine_duration.count()}.to_json());
}

void Supervisor::count_failure_for_quarantine(const RootCause& cause, int64_t now_wall_ms) {
  const spec::HealthSettings& health = spec_.health;
  if (cause.host.empty() || health.quarantine_after <= 0) return;
  auto& failures = failures_by_host_[cause.host];
  failures.emplace_back(now_wall_ms, cause.detail);
  int64_t since = now_wall_ms - health.quarantine_window.count();
  failures.erase(std::remove_if(failures.begin(), failures.end(), [&](const auto& failure) { return failure.first < since; }),
                 failures.end());
  if (static_cast<int>(failures.size()) < health.quarantine_after) return;
  std::vector<std::string> evidence;
  for (const auto& failure : failures) evidence.push_back(failure.second);
  quarantine(cause.host,
             "root cause of " + std::to_string(failures.size()) + " failures within " +
                 format_duration(health.quarantine_window) + " (health.quarantine.after " +
                 std::to_string(health.quarantine_after) + ")",
             std::move(evidence));
}

// ---- before the first generation ------------------------------------------------------------

void Supervisor::health_before_start(const HostHealthReported& event) {
  awaiting_health_.erase(event.host);
  const HostHealth& health = event.health;
  const bool planned = in_plan(plan_, event.host);
  if (health.verdict != HealthCheckResult::kFail) {
    std::string warned = health.summary(HealthCheckResult::kWarn);
    note_health(health, HostHealth::kAdmitted, warned.empty() ? "healthy" : "admitted with warnings: " + warned);
    start_when_all_connected();
    return;
  }
  std::string failed = health.summary(HealthCheckResult::kFail);
  note_health(health, HostHealth::kLeftOut,
              event.host + " failed its health check (" + failed + "): it is left out" +
                  (planned ? "; a spare takes its place or the job shrinks" : ""));
  if (!planned) {
    excluded_.insert(event.host);  // a spare that is not healthy is never planned
    return;
  }
  excluded_.insert(event.host);
  // A spare in its place keeps the world size and so needs no elastic.min_hosts; a smaller plan
  // does, as for a host lost before the start.
  Result<plan::RankPlan> next = replan_without(excluded_, spec_);
  std::string why = next ? "" : next.error().message;
  if (next && next->world_size != plan_.world_size && spec_.elastic.min_hosts <= 0) {
    why = "no healthy spare to take its place, and elastic.min_hosts is not set to start with fewer hosts";
  } else if (next) {
    record(events::PlanChanged{plan::diff_text(plan_, *next), std::vector<std::string>(excluded_.begin(), excluded_.end())}
               .to_json());
    plan_ = std::move(next).value();
    start_when_all_connected();
    return;
  }
  give_up_reason_ = event.host + " failed its health check (" + failed + ") and no plan is left without it: " + why;
  record(events::FailureUnrecoverable{give_up_reason_}.to_json());
  stop_generation(Ending::fail, ExitCode::hosts_lost, "health check");
}

// ---- before a re-rendezvous -------------------------------------------------------------------

bool Supervisor::health_gate_before_restart() {
  if (!recovery_ || !recovery_->next_plan) return !awaiting_health_.empty();
  ask_health_of(hosts_of(plan_), *recovery_->next_plan);
  return !awaiting_health_.empty();
}

std::set<std::string> Supervisor::ask_health_of(const std::set<std::string>& current, const plan::RankPlan& next) {
  std::set<std::string> asked;
  if (!recovery_) return asked;
  const RootCause& cause = recovery_->cause;
  const bool blamed_stays = cause.kind != FailureKind::host_lost && !cause.host.empty();
  int64_t now = clock_.monotonic_ms();
  for (const plan::PlanHost& host : next.hosts) {
    const std::string& name = host.entry.name;
    if (!connected_.count(name) || !health_checked_hosts_.count(name) || recovery_->health_checked.count(name) ||
        awaiting_health_.count(name)) {
      continue;
    }
    bool joining = current.count(name) == 0;
    bool blamed = blamed_stays && name == cause.host;
    if (!joining && !blamed) continue;
    recovery_->health_checked.insert(name);
    awaiting_health_[name] = now;
    if (recovery_->health_asked_ms == 0) recovery_->health_asked_ms = now;
    out_.push_back(CheckHostHealth{name, joining ? HostHealth::kJoin : HostHealth::kAfterFailure,
                                   !joining && !spec_.health.diagnose.empty()});
    asked.insert(name);
  }
  return asked;
}

void Supervisor::health_in_place(const HostHealthReported& event) {
  if (in_place_.awaiting_health.erase(event.host) == 0) {
    health_later(event);
    return;
  }
  awaiting_health_.erase(event.host);
  const HostHealth& health = event.health;
  if (health.verdict == HealthCheckResult::kFail) {
    std::string why = event.host + " failed its health check (" + health.summary(HealthCheckResult::kFail) + ")";
    note_health(health, HostHealth::kLeftOut, why + ": the recovery restarts every worker without it");
    excluded_.insert(event.host);
    // No replacement was started: the attempt becomes a restart whose plan leaves the host out
    // (a spare takes its place, checked in turn, or the job shrinks).
    fall_back_from_in_place(why);
    replan_after_exclusion();
    return;
  }
  std::string warned = health.summary(HealthCheckResult::kWarn);
  note_health(health, HostHealth::kAdmitted, warned.empty() ? "healthy" : "admitted with warnings: " + warned);
  continue_in_place_when_ready();
}

void Supervisor::health_while_recovering(const HostHealthReported& event) {
  if (awaiting_health_.erase(event.host) == 0) {
    health_later(event);
    return;
  }
  const HostHealth& health = event.health;
  if (health.verdict == HealthCheckResult::kFail) {
    note_health(health, HostHealth::kLeftOut,
                event.host + " failed its health check (" + health.summary(HealthCheckResult::kFail) +
                    "): the next generation goes on without it");
    excluded_.insert(event.host);
    replan_after_exclusion();
  } else {
    std::string warned = health.summary(HealthCheckResult::kWarn);
    note_health(health, HostHealth::kAdmitted, warned.empty() ? "healthy" : "admitted with warnings: " + warned);
  }
  if (awaiting_health_.empty() && awaiting_release_.empty() && recovery_ && recovery_->released_ms > 0) {
    start_next_generation();
  }
}

void Supervisor::health_later(const HostHealthReported& event) {
  // A host that connected after the start (a spare, a rejoined host) says its `start` checks; one
  // that is not in the plan and fails is never planned. A planned host's answer is only noted:
  // its generation runs, and a failure of it is judged as one.
  awaiting_health_.erase(event.host);
  const HostHealth& health = event.health;
  const bool planned = in_plan(plan_, event.host);
  if (health.verdict == HealthCheckResult::kFail && !planned) {
    note_health(health, HostHealth::kLeftOut, event.host + " failed its health check (" +
                                                  health.summary(HealthCheckResult::kFail) + "): it is not used");
    excluded_.insert(event.host);
    return;
  }
  std::string failed = health.summary(HealthCheckResult::kFail);
  std::string warned = health.summary(HealthCheckResult::kWarn);
  note_health(health, HostHealth::kAdmitted,
              !failed.empty() ? "failed a check while its generation runs (" + failed + "); a failure of it ends its part"
              : warned.empty() ? "healthy"
                               : "admitted with warnings: " + warned);
}

void Supervisor::check_health_deadlines(int64_t now) {
  std::vector<std::string> late;
  for (const auto& [host, asked_ms] : awaiting_health_) {
    bool blamed = recovery_ && recovery_->cause.host == host;
    if (now - asked_ms > health_deadline(blamed).count()) late.push_back(host);
  }
  for (const std::string& host : late) {
    awaiting_health_.erase(host);
    HostHealth health{host, phase_ == Phase::connecting ? HostHealth::kStart : HostHealth::kJoin,
                      HealthCheckResult::kWarn};
    health.checks.push_back({"answer", HealthCheckResult::kWarn, "no health report within " +
                                                                     format_duration(health_deadline(false)) +
                                                                     " (the checks' own limits + 10s)"});
    note_health(health, HostHealth::kUnchecked, host + " did not report its health in time: admitted unchecked");
    in_place_.awaiting_health.erase(host);
  }
  if (late.empty()) return;
  if (phase_ == Phase::connecting) {
    start_when_all_connected();
  } else if (phase_ == Phase::in_place_killing) {
    continue_in_place_when_ready();
  } else if (phase_ == Phase::recovering && awaiting_health_.empty() && awaiting_release_.empty() && recovery_ &&
             recovery_->released_ms > 0) {
    start_next_generation();
  }
}

}  // namespace dtrain::supervisor
