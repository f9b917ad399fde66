#include "launcher/report/trace_json.h"

#include <map>
#include <set>

namespace dtrain::report {

using nlohmann::json;

json chrome_trace(const RunRecord& record, const Timeline& timeline) {
  constexpr int kRunPid = 1;  // the supervisor: generations, recoveries, run-wide moments
  constexpr int kGenerationTid = 0, kRecoveryTid = 1, kPhaseTid = 2;
  std::map<std::string, int> host_pid;
  for (const std::string& host : timeline.hosts) host_pid.emplace(host, kRunPid + 1 + static_cast<int>(host_pid.size()));
  auto pid_of = [&](const std::string& host) {
    auto found = host_pid.find(host);
    if (found != host_pid.end()) return found->second;
    int pid = kRunPid + 1 + static_cast<int>(host_pid.size());
    host_pid.emplace(host, pid);
    return pid;
  };
  auto micros = [&](int64_t wall_ms) { return (wall_ms - timeline.start_ms) * 1000; };

  json events = json::array();
  auto complete = [&](std::string name, const char* category, int pid, int tid, int64_t start_ms, int64_t end_ms,
                      json args) {
    events.push_back({{"name", std::move(name)}, {"cat", category}, {"ph", "X"}, {"ts", micros(start_ms)},
                      {"dur", std::max<int64_t>(0, end_ms - start_ms) * 1000}, {"pid", pid}, {"tid", tid},
                      {"args", std::move(args)}});
  };

  for (const GenerationSpan& span : timeline.generations) {
    complete("gen " + std::to_string(span.generation), "generation", kRunPid, kGenerationTid, span.start_ms,
             span.end_ms, {{"world_size", span.world_size}, {"hosts", span.hosts.size()}});
  }
  for (const RecoverySpan& span : timeline.recoveries) {
    complete("recovery → gen " + std::to_string(span.generation + 1), "recovery", kRunPid, kRecoveryTid,
             span.start_ms, span.end_ms,
             {{"cause", span.cause}, {"action", span.action}, {"steps_lost", span.steps_lost}});
    // The phases one after another from the start: their sum is the recovery's total.
    int64_t at = span.start_ms;
    for (const auto& [phase, ms] : span.phases) {
      complete(phase, "recovery.phase", kRunPid, kPhaseTid, at, at + ms, {{"ms", ms}});
      at += ms;
    }
  }
  std::set<std::pair<int, int>> threads;  // (pid, tid) that need a name
  for (const RankSpan& span : timeline.ranks) {
    int pid = pid_of(span.host);
    threads.insert({pid, span.rank});
    complete("gen " + std::to_string(span.generation) + " rank " + std::to_string(span.rank), "worker", pid,
             span.rank, span.start_ms, span.end_ms, {{"end", span.end}});
  }
  for (const Mark& mark : timeline.marks) {
    bool on_rank = !mark.host.empty() && mark.rank >= 0;
    int pid = mark.host.empty() ? kRunPid : pid_of(mark.host);
    if (on_rank) threads.insert({pid, mark.rank});
    events.push_back({{"name", mark_kind_name(mark.kind)}, {"cat", "mark"}, {"ph", "i"},
                      {"ts", micros(mark.wall_ms)}, {"pid", pid}, {"tid", on_rank ? mark.rank : 0},
                      {"s", on_rank ? "t" : "p"}, {"args", {{"what", mark.label}, {"gen", mark.generation}}}});
  }

  // Names for the lanes: metadata events.
  auto meta = [&](const char* name, int pid, int tid, json args) {
    events.push_back({{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}});
  };
  meta("process_name", kRunPid, 0, {{"name", "run " + record.run_id}});
  meta("process_sort_index", kRunPid, 0, {{"sort_index", 0}});
  meta("thread_name", kRunPid, kGenerationTid, {{"name", "generations"}});
  meta("thread_name", kRunPid, kRecoveryTid, {{"name", "recoveries"}});
  meta("thread_name", kRunPid, kPhaseTid, {{"name", "recovery phases"}});
  for (const auto& [host, pid] : host_pid) {
    meta("process_name", pid, 0, {{"name", host}});
    meta("process_sort_index", pid, 0, {{"sort_index", pid}});
  }
  for (const auto& [pid, tid] : threads) meta("thread_name", pid, tid, {{"name", "rank " + std::to_string(tid)}});

  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"run_id", record.run_id}, {"start_ms", timeline.start_ms}}}};
}

}  // namespace dtrain::report
