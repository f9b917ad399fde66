// One run directory, read for the review (run_evidence.h).

#include "launcher/review/run_evidence.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "launcher/base/clock.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/events/event.h"
#include "launcher/report/timeline.h"
#include "launcher/runlog/event_log.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::review {
namespace {

constexpr off_t kTailBytes = 16 * 1024;

template <class T>
T median_of(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string time_of(const LoggedEvent& event) {
  std::optional<int64_t> wall = event.wall_ms();
  return wall ? format_timestamp_utc(*wall) : event.ts;
}

/// A worker's exit, kept to find a failure's sample.
struct ExitSample {
  int gen = -1;
  int rank = -1;
  std::vector<std::string> lines;
  std::string from;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines = split(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() > kSampleLines) lines.erase(lines.begin(), lines.end() - static_cast<long>(kSampleLines));
  return lines;
}

ExitSample exit_sample(const events::WorkerExit& exit) {
  ExitSample sample{exit.gen, exit.rank, {}, ""};
  if (exit.error && exit.error->traceback && !exit.error->traceback->empty()) {
    sample.lines = lines_of(*exit.error->traceback);
    sample.from = "worker.exit error traceback (events.jsonl)";
  } else if (!exit.tail.empty()) {
    sample.lines = exit.tail;
    if (sample.lines.size() > kSampleLines) {
      sample.lines.erase(sample.lines.begin(), sample.lines.end() - static_cast<long>(kSampleLines));
    }
    sample.from = "worker.exit tail (events.jsonl)";
  }
  return sample;
}

/// The sample of a failure: its own traceback, else its rank's exit (same generation), else the
/// rank's log file while the run directory has it.
void attach_sample(FailureSample& failure, const events::FailureCause& cause, const std::vector<ExitSample>& exits,
                   const std::string& run_dir) {
  if (cause.traceback && !cause.traceback->empty()) {
    failure.sample = lines_of(*cause.traceback);
    failure.sample_from = "failure.detected traceback (events.jsonl)";
    return;
  }
  if (failure.rank < 0) return;
  for (auto it = exits.rbegin(); it != exits.rend(); ++it) {
    if (it->rank == failure.rank && it->gen == failure.generation && !it->lines.empty()) {
      failure.sample = it->lines;
      failure.sample_from = it->from;
      return;
    }
  }
  std::string log = run_dir + "/ranks/" + std::to_string(failure.rank) + ".log";
  failure.sample = file_tail(log, kSampleLines);
  if (!failure.sample.empty()) failure.sample_from = "ranks/" + std::to_string(failure.rank) + ".log (its last lines)";
}

RecoveryRecord recovery_of(const LoggedEvent& event, const events::RecoveryCompleted& completed) {
  RecoveryRecord recovery;
  recovery.at = time_of(event);
  recovery.generation = event.gen.value_or(-1);
  recovery.action = completed.action;
  recovery.cause_kind = events::to_string(completed.cause.kind);
  recovery.cause_host = completed.cause.host;
  recovery.steps_lost = completed.steps_lost;
  recovery.fallback = completed.fallback.value_or("");
  // The phases in the order they happen, total_ms left out (the report's reading of them); the
  // total is their sum, as the report's bars show it.
  for (const auto& [name, ms] : report::recovery_phases(completed.phases)) {
    if (ms < 0) continue;
    recovery.phases.push_back({name, ms});
    recovery.total_ms += ms;
  }
  return recovery;
}

DrillGrade drill_of(const LoggedEvent& event, const events::DrillVerdict& verdict) {
  return drill_grade_of(verdict.report, json_string(verdict.report, "finished", time_of(event)));
}

/// Interval, size, save and restore figures from the commits (one per shard) and the recoveries.
void checkpoint_figures(RunEvidence& evidence, const std::vector<std::pair<int64_t, events::CheckpointCommitted>>& commits) {
  struct Step {
    int64_t at = 0, bytes = 0;
    double seconds = 0;
  };
  std::map<int64_t, Step> steps;  // by step: every shard of it together
  for (const auto& [at, commit] : commits) {
    Step& step = steps[commit.step];
    step.at = std::max(step.at, at);
    step.bytes += commit.bytes;
    step.seconds = std::max(step.seconds, commit.seconds);
  }
  CheckpointFigures& figures = evidence.checkpoints;
  figures.checkpoints = static_cast<int>(steps.size());
  std::vector<int64_t> bytes, step_gaps, time_gaps;
  std::vector<double> seconds;
  const std::pair<const int64_t, Step>* previous = nullptr;
  for (const auto& entry : steps) {
    bytes.push_back(entry.second.bytes);
    seconds.push_back(entry.second.seconds);
    if (previous && entry.second.at > previous->second.at) {
      step_gaps.push_back(entry.first - previous->first);
      time_gaps.push_back(entry.second.at - previous->second.at);
    }
    previous = &entry;
  }
  if (!bytes.empty()) figures.bytes = median_of(bytes);
  if (!seconds.empty()) figures.save_seconds = median_of(seconds);
  if (!step_gaps.empty()) {
    figures.interval_steps = median_of(step_gaps);
    figures.interval_ms = median_of(time_gaps);
    if (figures.interval_steps > 0) {
      evidence.step_ms = static_cast<double>(figures.interval_ms) / static_cast<double>(figures.interval_steps);
    }
  }
  std::vector<int64_t> restores;
  for (const RecoveryRecord& recovery : evidence.recoveries) {
    for (const RecoveryPhase& phase : recovery.phases) {
      if (phase.name == "first_step" || phase.name == "state_and_first_step") restores.push_back(phase.ms);
    }
  }
  if (!restores.empty()) figures.restore_ms = median_of(restores);
}

/// Every event of the log, visited once.
void read_events(RunEvidence& evidence, const registry::RunRow& run, const std::vector<LoggedEvent>& logged) {
  std::vector<ExitSample> exits;
  std::vector<std::pair<const LoggedEvent*, events::FailureCause>> detected;
  std::vector<std::pair<int64_t, events::CheckpointCommitted>> commits;
  for (const LoggedEvent& event : logged) {
    std::visit(events::Overloaded{
                   [&](const events::WorkerExit& exit) { exits.push_back(exit_sample(exit)); },
                   [&](const events::FailureDetected& failure) { detected.emplace_back(&event, failure.cause); },
                   [&](const events::RecoveryCompleted& completed) {
                     evidence.recoveries.push_back(recovery_of(event, completed));
                   },
                   [&](const events::CheckpointCommitted& commit) {
                     commits.emplace_back(event.wall_ms().value_or(0), commit);
                   },
                   [&](const events::CheckpointRejected&) { ++evidence.checkpoints.rejected; },
                   [&](const events::ResourcesReleased& released) {
                     evidence.releases.push_back({time_of(event), run.id, run.tenant, released.gen, released.host,
                                                  static_cast<int>(released.killed.size()), released.remaining,
                                                  released.ms, false, ""});
                   },
                   [&](const events::ResourcesUnconfirmed& unconfirmed) {
                     for (const std::string& host : unconfirmed.hosts) {
                       evidence.releases.push_back({time_of(event), run.id, run.tenant, event.gen.value_or(-1), host, 0,
                                                    0, 0, true, unconfirmed.detail});
                     }
                   },
                   [&](const events::DrillVerdict& verdict) { evidence.drills.push_back(drill_of(event, verdict)); },
                   [&](const events::RunFinished&) { evidence.finished = true; },
                   [](const auto&) {},
               },
               event.event);
  }
  std::map<int, bool> generation_has_root;  // the first failure detected in a generation is its root cause
  for (const auto& [event, cause] : detected) {
    FailureSample failure;
    failure.at = time_of(*event);
    failure.run_id = run.id;
    failure.tenant = run.tenant;
    failure.generation = event->gen.value_or(-1);
    failure.kind = events::to_string(cause.kind);
    failure.host = cause.host;
    failure.rank = cause.rank.value_or(-1);
    failure.detail = cause.detail;
    failure.root_cause = !generation_has_root[failure.generation];
    generation_has_root[failure.generation] = true;
    attach_sample(failure, cause, exits, run.run_dir);
    evidence.failures.push_back(std::move(failure));
  }
  for (RecoveryRecord& recovery : evidence.recoveries) {
    recovery.run_id = run.id;
    recovery.tenant = run.tenant;
  }
  for (DrillGrade& drill : evidence.drills) {
    drill.tenant = run.tenant;
    drill.from = run.id + "/events.jsonl";
  }
  evidence.checkpoints.run_id = run.id;
  evidence.checkpoints.tenant = run.tenant;
  checkpoint_figures(evidence, commits);
}

}  // namespace

DrillGrade drill_grade_of(const nlohmann::json& summary, std::string at) {
  DrillGrade drill;
  drill.at = std::move(at);
  drill.drill_id = json_string(summary, "drill_id");
  drill.run_id = json_string(summary, "run_id");
  drill.mode = json_string(summary, "mode");
  drill.verdict = json_string(summary, "verdict", "error");
  if (const nlohmann::json* faults = json_member(summary, "faults"); faults && faults->is_array()) {
    for (const nlohmann::json& fault : *faults) {
      std::string label = json_string(fault, "fault", "?");
      if (!json_string(fault, "target").empty()) label += ":" + json_string(fault, "target");
      drill.faults.push_back(label + " " + json_string(fault, "verdict", drill.verdict));
    }
  }
  if (const nlohmann::json* missed = json_member(summary, "missed"); missed && missed->is_array()) {
    for (const nlohmann::json& line : *missed) {
      if (line.is_string()) drill.missed.push_back(line.get<std::string>());
    }
  }
  if (const nlohmann::json* leftovers = json_member(summary, "leftover_pids"); leftovers && leftovers->is_array()) {
    drill.leftover_processes = static_cast<int>(leftovers->size());
  }
  if (!json_string(summary, "error").empty()) drill.missed.push_back("error: " + json_string(summary, "error"));
  return drill;
}

std::vector<std::string> file_tail(const std::string& path, size_t max_lines) {
  Result<UniqueFd> fd = open_regular_file(path, FollowLinks::kNo);
  if (!fd) return {};
  struct stat info {};
  if (::fstat(fd->get(), &info) != 0) return {};
  off_t start = std::max<off_t>(0, info.st_size - kTailBytes);
  std::string text(static_cast<size_t>(info.st_size - start), '\0');
  ssize_t got = ::pread(fd->get(), text.data(), text.size(), start);
  if (got <= 0) return {};
  text.resize(static_cast<size_t>(got));
  std::vector<std::string> lines = split(text, '\n');
  if (start > 0 && !lines.empty()) lines.erase(lines.begin());  // cut mid-line
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() > max_lines) lines.erase(lines.begin(), lines.end() - static_cast<long>(max_lines));
  for (std::string& line : lines) line = printable(line, 400);
  return lines;
}

RunEvidence read_run_evidence(const registry::RunRow& run) {
  RunEvidence evidence;
  evidence.checkpoints.run_id = run.id;
  evidence.checkpoints.tenant = run.tenant;
  if (run.run_dir.empty() || ::access(run.run_dir.c_str(), F_OK) != 0) {
    evidence.problems.push_back(run.id + ": run directory " + (run.run_dir.empty() ? "unknown" : run.run_dir) +
                                " is gone; its figures come from the registry alone");
    return evidence;
  }
  Result<std::vector<LoggedEvent>> logged = read_logged_events(
      run.run_dir + "/events.jsonl", [&](const EventLineError& error) {
        ++evidence.skipped_lines;
        if (evidence.skipped_lines <= 3) evidence.problems.push_back(error.message());
      });
  if (!logged) {
    evidence.problems.push_back(run.id + ": " + logged.error().message);
  } else {
    read_events(evidence, run, *logged);
  }
  spec::LoadResult spec = spec::load_job_spec(run.run_dir + "/spec.yaml", {}, spec::EnvValues::names_only);
  if (spec.ok()) {
    evidence.intent = spec.spec->intent;
  } else {
    std::string first = spec.diagnostics.empty() ? "unreadable" : spec.diagnostics.front().to_string();
    evidence.problems.push_back(run.id + ": spec.yaml not read, its intent left out: " + first);
  }
  return evidence;
}

}  // namespace dtrain::review
