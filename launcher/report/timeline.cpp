#include "launcher/report/timeline.h"

#include <algorithm>
#include <map>
#include <set>

#include <concepts>
#include <optional>

#include "launcher/events/event.h"
#include "launcher/metrics/goodput.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"

namespace dtrain::report {
namespace {

using nlohmann::json;

/// "rank 1 on gpu02: killed by SIGKILL" / "gpu02: silent for 2.1s".
std::string cause_text(const events::FailureCause& cause) {
  std::string where = cause.rank ? "rank " + std::to_string(*cause.rank) + " on " : "";
  where += cause.host.empty() ? "?" : cause.host;
  return cause.detail.empty() ? where : where + ": " + cause.detail;
}

MarkKind failure_kind(events::FailureKind kind) {
  switch (kind) {
    case events::FailureKind::worker_exit: return MarkKind::crash;
    case events::FailureKind::worker_hang: return MarkKind::hang;
    case events::FailureKind::host_lost: return MarkKind::host_lost;
    default: return MarkKind::failure;
  }
}

void add_host(std::vector<std::string>& hosts, std::set<std::string>& known, const std::string& host) {
  if (!host.empty() && known.insert(host).second) hosts.push_back(host);
}

}  // namespace

const char* mark_kind_name(MarkKind kind) {
  switch (kind) {
    case MarkKind::crash: return "crash";
    case MarkKind::hang: return "hang";
    case MarkKind::host_lost: return "host-lost";
    case MarkKind::failure: return "failure";
    case MarkKind::detected: return "detected";
    case MarkKind::stop: return "stop";
    case MarkKind::replan: return "replan";
    case MarkKind::spawn: return "spawn";
    case MarkKind::rendezvous: return "rendezvous";
    case MarkKind::first_step: return "first-step";
    case MarkKind::checkpoint: return "checkpoint";
    case MarkKind::drill: return "drill";
    case MarkKind::finished: return "finished";
  }
  return "?";
}

std::vector<std::pair<std::string, int64_t>> recovery_phases(const json& phases) {
  static const std::vector<std::string> order = {"detect", "kill", "abort", "stop", "replan", "spawn", "rendezvous",
                                                 "state_and_first_step", "first_step"};
  std::vector<std::pair<std::string, int64_t>> out;
  for (const std::string& name : order) {
    if (std::optional<int64_t> ms = json_int(phases, name + "_ms")) out.emplace_back(name, *ms);
  }
  if (!phases.is_object()) return out;
  for (auto it = phases.begin(); it != phases.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() <= 3 || key.compare(key.size() - 3, 3, "_ms") != 0 || key == "total_ms") continue;
    std::string name = key.substr(0, key.size() - 3);
    if (std::find(order.begin(), order.end(), name) != order.end()) continue;
    if (std::optional<int64_t> ms = json_int(phases, key)) out.emplace_back(name, *ms);
  }
  return out;
}

namespace {

/// A struct's own "host", for the events the timeline only takes a lane from.
std::string host_of(const events::Event& event) {
  return std::visit([](const auto& typed) -> std::string {
    if constexpr (requires { { typed.host } -> std::convertible_to<std::string>; }) {
      return typed.host;
    } else {
      return "";
    }
  }, event);
}

/// Reads the run's events into its timeline, one event at a time (build_timeline).
class TimelineBuilder {
 public:
  void add(const LoggedEvent& logged) {
    std::optional<int64_t> when = logged.wall_ms();
    if (!when) return;
    ts_ = *when;
    if (!have_time_ || ts_ < timeline_.start_ms) timeline_.start_ms = ts_;
    if (!have_time_ || ts_ > timeline_.end_ms) timeline_.end_ms = ts_;
    have_time_ = true;
    gen_ = logged.gen.value_or(generation_);  // events without "gen" belong to the newest plan
    std::visit([this, &logged](const auto& event) { on(event, logged.event); }, logged.event);
  }

  Timeline finish();

 private:
  void host(const std::string& name) { add_host(timeline_.hosts, known_hosts_, name); }
  void mark(MarkKind kind, std::string text, const std::string& where = "", int rank = -1, std::optional<int64_t> at = {}) {
    timeline_.marks.push_back({at.value_or(ts_), kind, where, gen_, rank, std::move(text)});
  }
  std::string gen_text() const { return "gen " + std::to_string(gen_); }

  void on(const events::RunSubmitted& submitted, const events::Event&) {
    for (const std::string& name : submitted.hosts) host(name);
  }
  void on(const events::PlanGeneration& plan, const events::Event&) {
    generation_ = std::max(generation_, gen_);
    GenerationSpan span;
    span.generation = gen_;
    span.start_ms = span.end_ms = ts_;
    span.world_size = plan.world_size;
    for (const std::string& name : plan.hosts) {
      span.hosts.push_back(name);
      host(name);
    }
    if (!timeline_.generations.empty()) timeline_.generations.back().end_ms = ts_;
    timeline_.generations.push_back(std::move(span));
    if (gen_ > 0) {
      mark(MarkKind::replan, gen_text() + " planned: world " + std::to_string(plan.world_size) + " on " +
                                 std::to_string(timeline_.generations.back().hosts.size()) + " hosts");
    }
  }
  void on(const events::GenerationSpawned&, const events::Event&) {
    if (!timeline_.generations.empty() && timeline_.generations.back().generation == gen_) {
      timeline_.generations.back().start_ms = ts_;
    }
  }
  void on(const events::WorkerStarted& started, const events::Event&) {
    host(started.host);
    open_ranks_[{gen_, started.rank}] = timeline_.ranks.size();
    timeline_.ranks.push_back({gen_, started.rank, started.host, ts_, ts_, "running"});
    if (spawned_on_.insert({gen_, started.host}).second) mark(MarkKind::spawn, gen_text() + " workers started", started.host);
  }
  void on(const events::WorkerExit& exit, const events::Event&) {
    auto open = open_ranks_.find({gen_, exit.rank});
    if (open == open_ranks_.end()) return;
    RankSpan& span = timeline_.ranks[open->second];
    span.end_ms = ts_;
    span.end = exit.signal && !exit.signal->empty() ? *exit.signal : "exit " + std::to_string(exit.code.value_or(0));
    open_ranks_.erase(open);
  }
  void on(const events::FailureDetected& detected, const events::Event&) {
    const events::FailureCause& cause = detected.cause;
    host(cause.host);
    int rank = cause.rank.value_or(-1);
    std::string where = rank >= 0 ? "rank " + std::to_string(rank) : cause.host;
    // The failure itself, where it began: a hang or a lost host was silent for a while before
    // the supervisor could tell.
    int64_t began = ts_;
    if (auto silence = silences_.find({cause.host, rank}); silence != silences_.end() && silence->second > 0) {
      began = ts_ - silence->second;
      silences_.erase(silence);
    }
    mark(failure_kind(cause.kind), events::to_string(cause.kind) + ": " + where + ": " + cause.detail, cause.host, rank, began);
    mark(MarkKind::detected,
         "detected " + events::to_string(cause.kind) + " (" + where + ")" +
             (detected.latency_ms ? " after " + std::to_string(*detected.latency_ms) + " ms" : ""),
         cause.host, rank);
  }
  // The failure.detected that follows names the kind; how long the silence was is here.
  void on(const events::WorkerHang& hang, const events::Event&) { silences_[{hang.host, hang.rank}] = hang.silent_ms; }
  void on(const events::HostLost& lost, const events::Event&) {
    if (lost.silent_ms) silences_[{lost.host, -1}] = *lost.silent_ms;
  }
  void on(const events::RecoveryStarted& started, const events::Event&) {
    RecoverySpan span;
    span.generation = gen_;
    span.start_ms = span.end_ms = ts_;
    span.action = started.action;
    span.cause = cause_text(started.cause);
    open_recovery_ = timeline_.recoveries.size();
    timeline_.recoveries.push_back(std::move(span));
  }
  void on(const events::ResourcesReleased& released, const events::Event&) {
    host(released.host);
    mark(MarkKind::stop, gen_text() + " workers gone (" + std::to_string(released.ms) + " ms)", released.host);
  }
  void on(const events::CommReady& ready, const events::Event&) {
    mark(MarkKind::rendezvous, gen_text() + ": " + std::to_string(ready.ranks) + " ranks' communicators up");
  }
  void on(const events::RecoveryCompleted& completed, const events::Event&) {
    RecoverySpan* span = open_recovery_ ? &timeline_.recoveries[*open_recovery_] : nullptr;
    if (!span) {  // a recovery.started lost to a damaged line: keep what this event says
      timeline_.recoveries.push_back({gen_, ts_, ts_, "", events::to_string(completed.kind), 0, {}});
      span = &timeline_.recoveries.back();
      span->cause = cause_text(completed.cause);
    }
    span->end_ms = ts_;
    span->steps_lost = completed.steps_lost;
    span->phases = recovery_phases(completed.phases);
    open_recovery_.reset();
    mark(MarkKind::first_step, gen_text() + " first step (resumed at " + std::to_string(completed.resume_step) + ", " +
                                   std::to_string(span->steps_lost) + " steps lost)");
  }
  void on(const events::CheckpointCommitted& committed, const events::Event&) {
    mark(MarkKind::checkpoint, "checkpoint step " + std::to_string(committed.step));
  }
  void on(const events::DrillInjected& injected, const events::Event&) {
    mark(MarkKind::drill, "drill: " + injected.fault + (injected.target.empty() ? "" : " → " + injected.target));
  }
  void on(const events::RunFinished& finished, const events::Event&) {
    mark(MarkKind::finished, "run " + (finished.state.empty() ? std::string("ended") : finished.state) + " (exit " +
                                 std::to_string(finished.exit_code) + ")");
  }
  void on(const auto&, const events::Event& event) { host(host_of(event)); }

  Timeline timeline_;
  std::set<std::string> known_hosts_;
  bool have_time_ = false;
  int generation_ = 0;  // the newest generation planned so far
  std::map<std::pair<int, int>, size_t> open_ranks_;  // (gen, rank) → index into timeline_.ranks
  std::set<std::pair<int, std::string>> spawned_on_;  // (gen, host) with a spawn mark already
  std::optional<size_t> open_recovery_;               // index of the recovery not completed yet
  std::map<std::pair<std::string, int>, int64_t> silences_;  // (host, rank) → silent_ms of a hang or loss
  int64_t ts_ = 0;  // the event being read: when
  int gen_ = 0;     // and its generation
};

Timeline TimelineBuilder::finish() {
  if (!timeline_.generations.empty()) timeline_.generations.back().end_ms = timeline_.end_ms;
  for (auto& [key, index] : open_ranks_) timeline_.ranks[index].end_ms = timeline_.end_ms;
  std::stable_sort(timeline_.marks.begin(), timeline_.marks.end(),
                   [](const Mark& a, const Mark& b) { return a.wall_ms < b.wall_ms; });
  if (!timeline_.marks.empty()) timeline_.start_ms = std::min(timeline_.start_ms, timeline_.marks.front().wall_ms);
  return std::move(timeline_);
}

}  // namespace

Timeline build_timeline(const RunRecord& record) {
  TimelineBuilder builder;
  for (const LoggedEvent& event : record.events) builder.add(event);
  return builder.finish();
}

LaneChoice choose_lanes(const Timeline& timeline, size_t max_lanes) {
  LaneChoice choice;
  max_lanes = std::max<size_t>(max_lanes, 2);
  if (timeline.hosts.size() <= max_lanes) {
    choice.shown = timeline.hosts;
    return choice;
  }
  std::set<std::string> eventful;
  for (const Mark& mark : timeline.marks) {
    if (mark.kind == MarkKind::crash || mark.kind == MarkKind::hang || mark.kind == MarkKind::host_lost ||
        mark.kind == MarkKind::failure || mark.kind == MarkKind::detected) {
      eventful.insert(mark.host);
    }
  }
  size_t room = max_lanes - 1;
  std::set<std::string> chosen;
  for (const std::string& host : timeline.hosts) {
    if (chosen.size() < room && eventful.count(host)) chosen.insert(host);
  }
  for (const std::string& host : timeline.hosts) {
    if (chosen.size() < room) chosen.insert(host);
  }
  for (const std::string& host : timeline.hosts) {
    if (chosen.count(host)) choice.shown.push_back(host);
  }
  choice.grouped = timeline.hosts.size() - choice.shown.size();
  return choice;
}

}  // namespace dtrain::report
