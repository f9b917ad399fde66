#include "launcher/report/timeline.h"

#include <algorithm>
#include <map>
#include <set>

#include "launcher/events/event_catalogue.h"
#include "launcher/metrics/goodput.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"

namespace dtrain::report {
namespace {

using nlohmann::json;

int int_field(const json& event, std::string_view key, int fallback = -1) {
  std::optional<int64_t> value = json_int(event, key);
  return value && *value >= INT32_MIN && *value <= INT32_MAX ? static_cast<int>(*value) : fallback;
}

/// "rank 1 on gpu02: killed by SIGKILL" / "gpu02: silent for 2.1s".
std::string cause_text(const json& cause) {
  std::string where = json_member(cause, "rank") ? "rank " + std::to_string(int_field(cause, "rank")) + " on " : "";
  where += json_string(cause, "host", "?");
  std::string detail = json_string(cause, "detail");
  return detail.empty() ? where : where + ": " + detail;
}

MarkKind failure_kind(const std::string& kind) {
  if (kind == "worker.exit") return MarkKind::crash;
  if (kind == "worker.hang") return MarkKind::hang;
  if (kind == "host.lost") return MarkKind::host_lost;
  return MarkKind::failure;
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

Timeline build_timeline(const RunRecord& record) {
  Timeline timeline;
  std::set<std::string> known_hosts;
  bool have_time = false;
  int generation = 0;  // the newest generation planned so far: events without "gen" belong to it
  std::map<std::pair<int, int>, size_t> open_ranks;  // (gen, rank) → index into timeline.ranks
  std::set<std::pair<int, std::string>> spawned_on;  // (gen, host) with a spawn mark already
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t open_recovery = kNone;  // index of the recovery not completed yet
  std::map<std::pair<std::string, int>, int64_t> silences;  // (host, rank) → silent_ms of a hang or loss

  for (const json& event : record.events) {
    std::optional<int64_t> when = event_wall_ms(event);
    if (!when) continue;
    int64_t ts = *when;
    if (!have_time || ts < timeline.start_ms) timeline.start_ms = ts;
    if (!have_time || ts > timeline.end_ms) timeline.end_ms = ts;
    have_time = true;
    std::string name = json_string(event, "ev");
    std::string host = json_string(event, "host");
    int gen = int_field(event, "gen", generation);
    int rank = int_field(event, "rank");

    if (name == events::kRunSubmitted) {
      if (const json* hosts = json_member(event, "hosts"); hosts && hosts->is_array()) {
        for (const json& entry : *hosts) {
          if (entry.is_string()) add_host(timeline.hosts, known_hosts, entry.get<std::string>());
        }
      }
    } else if (name == events::kPlanGeneration) {
      generation = std::max(generation, gen);
      GenerationSpan span;
      span.generation = gen;
      span.start_ms = span.end_ms = ts;
      span.world_size = int_field(event, "world_size", 0);
      if (const json* hosts = json_member(event, "hosts"); hosts && hosts->is_array()) {
        for (const json& entry : *hosts) {
          if (!entry.is_string()) continue;
          span.hosts.push_back(entry.get<std::string>());
          add_host(timeline.hosts, known_hosts, span.hosts.back());
        }
      }
      if (!timeline.generations.empty()) timeline.generations.back().end_ms = ts;
      timeline.generations.push_back(std::move(span));
      if (gen > 0) {
        timeline.marks.push_back({ts, MarkKind::replan, "", gen, -1,
                                  "gen " + std::to_string(gen) + " planned: world " +
                                      std::to_string(int_field(event, "world_size", 0)) + " on " +
                                      std::to_string(timeline.generations.back().hosts.size()) + " hosts"});
      }
    } else if (name == events::kGenerationSpawned) {
      if (!timeline.generations.empty() && timeline.generations.back().generation == gen) {
        timeline.generations.back().start_ms = ts;
      }
    } else if (name == events::kWorkerStarted) {
      add_host(timeline.hosts, known_hosts, host);
      open_ranks[{gen, rank}] = timeline.ranks.size();
      timeline.ranks.push_back({gen, rank, host, ts, ts, "running"});
      if (spawned_on.insert({gen, host}).second) {
        timeline.marks.push_back({ts, MarkKind::spawn, host, gen, -1, "gen " + std::to_string(gen) + " workers started"});
      }
    } else if (name == events::kWorkerExit) {
      auto open = open_ranks.find({gen, rank});
      if (open != open_ranks.end()) {
        RankSpan& span = timeline.ranks[open->second];
        span.end_ms = ts;
        std::string signal = json_string(event, "signal");
        span.end = !signal.empty() ? signal : "exit " + std::to_string(int_field(event, "code", 0));
        open_ranks.erase(open);
      }
    } else if (name == events::kFailureDetected) {
      add_host(timeline.hosts, known_hosts, host);
      std::string kind = json_string(event, "kind");
      std::string detail = json_string(event, "detail");
      std::string where = rank >= 0 ? "rank " + std::to_string(rank) : host;
      // The failure itself, where it began: a hang or a lost host was silent for a while
      // before the supervisor could tell.
      int64_t began = ts;
      if (auto silence = silences.find({host, rank}); silence != silences.end() && silence->second > 0) {
        began = ts - silence->second;
        silences.erase(silence);
      }
      timeline.marks.push_back({began, failure_kind(kind), host, gen, rank, kind + ": " + where + ": " + detail});
      timeline.marks.push_back({ts, MarkKind::detected, host, gen, rank,
                                "detected " + kind + " (" + where + ")" +
                                    (json_int(event, "latency_ms") ? " after " + std::to_string(int_field(event, "latency_ms")) + " ms" : "")});
    } else if (name == events::kWorkerHang || name == events::kHostLost) {
      // The failure.detected that follows names the kind; how long the silence was is here.
      if (std::optional<int64_t> silent = json_int(event, "silent_ms")) silences[{host, rank}] = *silent;
    } else if (name == events::kRecoveryStarted) {
      RecoverySpan span;
      span.generation = gen;
      span.start_ms = span.end_ms = ts;
      span.action = json_string(event, "action");
      if (const json* cause = json_member(event, "cause")) span.cause = cause_text(*cause);
      open_recovery = timeline.recoveries.size();
      timeline.recoveries.push_back(std::move(span));
    } else if (name == events::kResourcesReleased) {
      add_host(timeline.hosts, known_hosts, host);
      timeline.marks.push_back({ts, MarkKind::stop, host, gen, -1,
                                "gen " + std::to_string(gen) + " workers gone (" +
                                    std::to_string(int_field(event, "ms", 0)) + " ms)"});
    } else if (name == events::kCommReady) {
      timeline.marks.push_back({ts, MarkKind::rendezvous, "", gen, -1,
                                "gen " + std::to_string(gen) + ": " + std::to_string(int_field(event, "ranks", 0)) +
                                    " ranks' communicators up"});
    } else if (name == events::kRecoveryCompleted) {
      RecoverySpan* span = open_recovery != kNone ? &timeline.recoveries[open_recovery] : nullptr;
      if (!span) {  // a recovery.started lost to a damaged line: keep what this event says
        timeline.recoveries.push_back({gen, ts, ts, "", json_string(event, "kind"), 0, {}});
        span = &timeline.recoveries.back();
        if (const json* cause = json_member(event, "cause")) span->cause = cause_text(*cause);
      }
      span->end_ms = ts;
      span->steps_lost = json_int(event, "steps_lost").value_or(0);
      if (const json* phases = json_member(event, "phases")) span->phases = recovery_phases(*phases);
      open_recovery = kNone;
      timeline.marks.push_back({ts, MarkKind::first_step, "", gen, -1,
                                "gen " + std::to_string(gen) + " first step (resumed at " +
                                    std::to_string(int_field(event, "resume_step", 0)) + ", " +
                                    std::to_string(span->steps_lost) + " steps lost)"});
    } else if (name == events::kCheckpointCommitted) {
      timeline.marks.push_back({ts, MarkKind::checkpoint, "", gen, -1,
                                "checkpoint step " + std::to_string(int_field(event, "step", 0))});
    } else if (name == events::kDrillInjected) {
      std::string target = json_string(event, "target");
      timeline.marks.push_back({ts, MarkKind::drill, "", gen, -1,
                                "drill: " + json_string(event, "fault") + (target.empty() ? "" : " → " + target)});
    } else if (name == events::kRunFinished) {
      timeline.marks.push_back({ts, MarkKind::finished, "", gen, -1,
                                "run " + json_string(event, "state", "ended") + " (exit " +
                                    std::to_string(int_field(event, "exit_code", 0)) + ")"});
    } else {
      add_host(timeline.hosts, known_hosts, host);
    }
  }
  if (!timeline.generations.empty()) timeline.generations.back().end_ms = timeline.end_ms;
  for (auto& [key, index] : open_ranks) timeline.ranks[index].end_ms = timeline.end_ms;
  std::stable_sort(timeline.marks.begin(), timeline.marks.end(),
                   [](const Mark& a, const Mark& b) { return a.wall_ms < b.wall_ms; });
  if (!timeline.marks.empty()) timeline.start_ms = std::min(timeline.start_ms, timeline.marks.front().wall_ms);
  return timeline;
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
