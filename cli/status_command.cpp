// `dtrain status [RUN] [--json] [--events N]`: the runs under $DTRAIN_HOME, or one run in
// detail. Reads state.json and events.jsonl only; never talks to the supervisor, so it works
// the same during a run, after it, and after the supervisor died. `--watch [--interval S]`
// refreshes a run's step, rate, ETA, stragglers and last event until the run ends.

#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <thread>
#include <unistd.h>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/metrics/step_split.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/plan_record.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"
#include "launcher/spec/spec_loader.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain::cli {
namespace {

using nlohmann::json;


int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

/// "2026-11-29 23:41:02" in local time.
std::string local_datetime(int64_t wall_ms) {
  std::time_t seconds = static_cast<std::time_t>(wall_ms / 1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &local);
  return buffer;
}

/// `text`, or `fallback` when it is empty (a field the state file did not have).
std::string or_unknown(const std::string& text, const char* fallback) { return text.empty() ? fallback : text; }

/// "5s", "1m05s", "2h03m", "3d04h": coarse enough to read at a glance.
std::string human_duration(int64_t ms) { return format_duration(Millis(ms), DurationStyle::elapsed); }

/// "0.4s", "12.0s", then human_duration: for heartbeat ages, where tenths matter.
std::string short_age(int64_t ms) { return format_duration(Millis(ms), DurationStyle::tenths); }

/// A JSON value as a person reads it: strings bare (quoted if they hold spaces), null as "-".
std::string plain(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    return text.find_first_of(" \t\"") == std::string::npos && !text.empty() ? printable(text) : json_compact(value);
  }
  if (value.is_number_float()) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.4g", value.get<double>());
    return buffer;
  }
  return json_compact(value);
}

/// A beat metric's value in `dtrain status`: "-" when unset, then by its unit.
std::string metric_text(const contract::BeatMetric& metric, const std::optional<double>& value) {
  if (!value) return "-";
  switch (metric.unit) {
    case contract::MetricUnit::milliseconds: return format_duration(Millis(std::llround(*value)), DurationStyle::tenths);
    case contract::MetricUnit::bytes: return describe_bytes(static_cast<unsigned long long>(std::max(0.0, *value)));
    case contract::MetricUnit::plain: break;
  }
  return metric.integral ? std::to_string(std::llround(*value)) : plain(json(*value));
}

/// "rank=2 host=localhost signal=SIGKILL": the fields that locate something first, then the
/// rest in key order.
std::string key_values(const json& object, const std::vector<std::string>& skip) {
  static const std::vector<std::string> first = {"gen", "rank", "host", "local_rank", "pid"};
  std::vector<std::string> parts;
  for (const std::string& key : first) {
    if (const json* value = json_member(object, key)) parts.push_back(key + "=" + plain(*value));
  }
  if (object.is_object()) {
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (std::find(first.begin(), first.end(), it.key()) != first.end()) continue;
      if (std::find(skip.begin(), skip.end(), it.key()) != skip.end()) continue;
      parts.push_back(it.key() + "=" + plain(it.value()));
    }
  }
  return join(parts, " ");
}

/// "23:41:02.120 worker.exit rank=2 host=localhost signal=SIGKILL"; bulky fields (output tails,
/// incident lists, causes) stay in events.jsonl.
std::string compact_event(const LoggedEvent& event) {
  const std::string& ts = event.ts;
  std::string when = ts;
  if (std::optional<int64_t> ms = parse_timestamp_utc(ts)) {
    std::time_t seconds = static_cast<std::time_t>(*ms / 1000);
    std::tm local{};
    localtime_r(&seconds, &local);
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%02d:%02d:%02d.%03d", local.tm_hour, local.tm_min,
                  local.tm_sec, static_cast<int>(*ms % 1000));
    when = buffer;
  }
  std::string line = when + " " + std::string(events::event_name(event.event));
  std::string fields = key_values(to_json(event), {"ts", "ev", "tail", "incidents", "cause", "log"});
  return fields.empty() ? line : line + " " + fields;
}

/// Left-aligned columns, two spaces apart; no trailing blanks.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  std::vector<std::vector<std::string>> shown;  // a host or exit text may come from an agent: printable
  for (const auto& row : rows) {
    shown.emplace_back();
    for (const std::string& cell : row) shown.back().push_back(printable(cell));
  }
  for (const auto& row : shown) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : shown) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string exit_text(const std::optional<RunSnapshot::RankExit>& exit) {
  if (!exit) return "-";
  if (exit->signal) return *exit->signal;
  if (exit->code) return "code " + std::to_string(*exit->code);
  return "-";
}

template <class Integer>
std::string opt_int(const std::optional<Integer>& value) {
  return value ? std::to_string(*value) : "-";
}

/// "detect 31ms, stop 53ms, replan 0ms, spawn 221ms, rendezvous 40ms, first step 64ms": every
/// *_ms phase recovery.completed carries, known ones in the order they happen, unknown ones
/// (a newer supervisor's) after them in key order; total_ms is the headline, not a phase.
std::string phases_text(const json& phases) {
  static const std::vector<std::string> order = {"detect", "kill", "abort", "stop", "replan", "spawn", "rendezvous",
                                                 "state_and_first_step", "first_step"};
  std::vector<std::string> parts;
  auto add = [&](const std::string& name) {
    std::optional<int64_t> ms = json_int(phases, name + "_ms");
    if (!ms) return;
    std::string label = name;
    std::replace(label.begin(), label.end(), '_', ' ');
    parts.push_back(label + " " + std::to_string(*ms) + "ms");
  };
  for (const std::string& name : order) add(name);
  for (auto it = phases.begin(); it != phases.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() <= 3 || key.compare(key.size() - 3, 3, "_ms") != 0 || key == "total_ms") continue;
    std::string name = key.substr(0, key.size() - 3);
    if (std::find(order.begin(), order.end(), name) == order.end()) add(name);
  }
  return join(parts, ", ");
}

/// "gen 1 after rank 2 on localhost killed by SIGKILL: resumed at step 300 (1 steps lost) in
/// 378ms — detect 31ms, stop 53ms, replan 0ms, spawn 221ms, first step 104ms"
std::string recovery_text(const RunSnapshot::Recovery& recovery) {
  const events::RecoveryCompleted& completed = recovery.completed;
  const events::FailureCause& cause = completed.cause;
  std::string text = "gen " + std::to_string(recovery.gen);
  text += " after " + (cause.rank ? "rank " + std::to_string(*cause.rank) + " on " : std::string()) +
          (cause.host.empty() ? "?" : cause.host) + " " + cause.detail;
  text += std::string(completed.action == "in-place" ? ": resumed in place at step " : ": resumed at step ") +
          std::to_string(completed.resume_step) + " (" + std::to_string(completed.steps_lost) + " steps lost)";
  // The phases are the event's open-ended timings ("<phase>_ms"), read as the event holds them.
  if (completed.phases.is_object()) {
    if (std::optional<int64_t> total = json_int(completed.phases, "total_ms")) {
      text += " in " + std::to_string(*total) + "ms";
    }
    if (std::string list = phases_text(completed.phases); !list.empty()) text += " — " + list;
  }
  return text;
}

int list_runs(bool as_json) {
  Result<std::vector<RunSummary>> runs = RunDirectory::list_runs();
  if (!runs) {
    std::fprintf(stderr, "dtrain status: %s\n", runs.error().message.c_str());
    return exit_code_for(runs.error());
  }
  int64_t now = now_ms();
  if (as_json) {
    json out = json::array();
    for (const RunSummary& run : *runs) {
      out.push_back({{"run_id", run.id},
                     {"name", run.name},
                     {"state", run.display_state},
                     {"supervisor_alive", run.supervisor_alive},
                     {"hosts", run.host_count},
                     {"world_size", run.world_size},
                     {"started_at_ms", run.started_at_ms},
                     {"finished_at_ms", run.finished_at_ms ? json(*run.finished_at_ms) : json()},
                     {"exit_code", run.exit_code ? json(*run.exit_code) : json()},
                     {"path", run.path},
                     {"problem", run.problem.empty() ? json() : json(run.problem)}});
    }
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  if (runs->empty()) {
    std::printf("no runs in %s\n", runs_root().c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"RUN ID", "NAME", "STATE", "HOSTS", "WORLD", "STARTED", "DURATION"}};
  for (const RunSummary& run : *runs) {
    // A run whose supervisor vanished has no end time: its duration is unknown, not growing.
    std::string duration = "-";
    if (run.finished_at_ms) duration = human_duration(*run.finished_at_ms - run.started_at_ms);
    else if (run.supervisor_alive) duration = human_duration(now - run.started_at_ms);
    rows.push_back({run.id, run.name.empty() ? "-" : run.name, run.display_state,
                    std::to_string(run.host_count), std::to_string(run.world_size),
                    local_datetime(run.started_at_ms), duration});
  }
  print_table(rows);
  return 0;
}

/// Values carry what workers wrote (root causes, tracebacks, event fields): printable only, so
/// an escape sequence in an error message cannot retitle or rewrite the operator's terminal.
void print_field(const char* label, const std::string& value) {
  std::printf("%-12s %s\n", label, printable(value).c_str());
}

/// "gen 2: world 4 = dp 2 × pp 1 × tp 2; global batch 24 = micro 4 × dp 2 × grad_accum 3"
std::string plan_headline(const PlanRecord& plan) {
  std::string dp = std::to_string(plan.data);
  std::string line = "gen " + std::to_string(plan.generation) + ": world " + std::to_string(plan.world_size) +
                     " = dp " + dp + " × pp " + std::to_string(plan.pipeline) + " × tp " +
                     std::to_string(plan.tensor) + "; ";
  if (plan.global_batch == 0) {
    return line + "global batch not set (micro " + std::to_string(plan.micro_batch) + ", grad_accum " +
           std::to_string(plan.grad_accum) + ")";
  }
  return line + "global batch " + std::to_string(plan.global_batch) + " = micro " +
         std::to_string(plan.micro_batch) + " × dp " + dp + " × grad_accum " + std::to_string(plan.grad_accum);
}

/// The plan block: sizes and batch, how it differs from generation 0, exclusions and spares,
/// then one line per host: "dt-h1  0(0,0,0) 1(0,0,1)" (rank, then its dp, pp, tp).
/// Past these sizes the text view summarises (hosts by state, ranks that stand out) unless
/// --all: a 2,048-host run printed 18,000 lines, which nobody reads in a terminal.
constexpr size_t kHostsListed = 32;
constexpr size_t kRanksListed = 64;
constexpr size_t kStandoutRanks = 32;

void print_plan(const RunDirectory& run, const Result<PlanRecord>& plan, bool all) {
  if (!plan) {
    print_field("plan", "- (" + plan.error().message + ")");
    return;
  }
  print_field("plan", plan_headline(*plan));
  if (std::string change = plan_history_text(run, *plan); !change.empty()) print_field("", change);
  print_field("", "excluded: " + (plan->without.empty() ? std::string("none") : join(plan->without, ", ")) +
                      "; spares in use: " +
                      (plan->spares_used.empty() ? std::string("none") : join(plan->spares_used, ", ")));
  print_field("", "rank(dp,pp,tp) by host:");
  size_t width = 0;
  for (const PlanRecord::Host& host : plan->hosts) {
    width = std::max(width, host.name.size() + (host.spare ? 8 : 0));
  }
  size_t shown = 0;
  for (const PlanRecord::Host& host : plan->hosts) {
    if (!all && shown == kHostsListed / 4 && plan->hosts.size() > kHostsListed) {
      print_field("", "  ... " + std::to_string(plan->hosts.size() - shown) + " more hosts (--all lists them)");
      break;
    }
    ++shown;
    std::string name = host.name + (host.spare ? " (spare)" : "");
    std::vector<std::string> ranks;
    for (const PlanRecord::Rank& rank : host.ranks) {
      ranks.push_back(std::to_string(rank.rank) + "(" + std::to_string(rank.dp) + "," + std::to_string(rank.pp) +
                      "," + std::to_string(rank.tp) + ")");
    }
    print_field("", "  " + name + std::string(width - name.size() + 2, ' ') + join(ranks, " "));
  }
}

/// "rank 7 on gpu02 (score 0.16, 30 ms of work per step)" for the first few entries of
/// state.json's stragglers (ranks slower than the fastest, metrics.straggler_threshold); "none"
/// for an empty list.
std::string stragglers_text(const RunSnapshot& state) {
  const std::vector<RunSnapshot::Straggler>& stragglers = state.stragglers;
  if (stragglers.empty()) return "none";
  constexpr size_t kShown = 8;
  std::vector<std::string> named;
  for (size_t i = 0; i < stragglers.size() && i < kShown; ++i) {
    const RunSnapshot::Straggler& straggler = stragglers[i];
    char score[64];
    std::snprintf(score, sizeof score, "score %.2f, %.0f ms of work per step", straggler.score,
                  straggler.median_step_ms);
    named.push_back("rank " + std::to_string(straggler.rank) + " on " + or_unknown(straggler.host, "?") + " (" +
                    score + ")");
  }
  if (stragglers.size() > kShown) named.push_back("and " + std::to_string(stragglers.size() - kShown) + " more");
  return join(named, ", ");
}

/// "input 71% · collectives 5% · compute 24% of 98.0 ms a step (bottleneck: data)" over the ranks'
/// latest beats (launcher/metrics/step_split.h: the rule of the report and metrics.prom); empty
/// when no rank reports its time waiting for input or in collectives.
std::string step_split_text(const RunSnapshot& state) {
  metrics::StepSplitBuilder builder;
  for (const RunSnapshot::Rank& rank : state.ranks) builder.add(rank.rank, rank.metrics);
  metrics::StepSplit split = builder.build();
  if (!split.bottleneck) return "";
  std::string text = split.shares_text(" · ") + " (bottleneck: " + std::string(metrics::to_string(*split.bottleneck));
  if (split.waited_for) text += ", waiting for rank " + std::to_string(*split.waited_for);
  return text + ")";
}

/// "2048: 2047 connected, 1 lost (sim01025)": hosts by state, naming those not connected.
std::string hosts_summary(const std::vector<RunSnapshot::Host>& list) {
  std::map<std::string, size_t> by_state;
  std::vector<std::string> attention;
  for (const RunSnapshot::Host& host : list) {
    std::string state = or_unknown(host.state, "?");
    ++by_state[state];
    if (state != "connected" && attention.size() < 16) attention.push_back(or_unknown(host.name, "?") + " " + state);
  }
  std::vector<std::string> counts;
  for (const auto& [state, count] : by_state) counts.push_back(std::to_string(count) + " " + state);
  std::string text = std::to_string(list.size()) + ": " + join(counts, ", ");
  if (!attention.empty()) text += "; " + join(attention, ", ") + (attention.size() == 16 ? ", ..." : "");
  return text + " (--all lists every host)";
}

/// The ranks worth a row when there are too many for all: not in the most common state, behind
/// the median step, or silent for more than 3x the median beat age (and 2 s). At most
/// kStandoutRanks, in rank order; `summary` gets one line about all of them.
std::vector<const RunSnapshot::Rank*> standout_ranks(const std::vector<RunSnapshot::Rank>& ranks,
                                                     int64_t age_reference, std::string& summary) {
  std::map<std::string, size_t> by_state;
  std::vector<int64_t> steps, ages;
  for (const RunSnapshot::Rank& rank : ranks) {
    ++by_state[or_unknown(rank.state, "-")];
    if (rank.step) steps.push_back(*rank.step);
    if (rank.last_beat_ms) ages.push_back(age_reference - *rank.last_beat_ms);
  }
  auto median = [](std::vector<int64_t> values) -> std::optional<int64_t> {
    if (values.empty()) return std::nullopt;
    std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2), values.end());
    return values[values.size() / 2];
  };
  std::string common;
  size_t common_count = 0;
  std::vector<std::string> counts;
  for (const auto& [state, count] : by_state) {
    counts.push_back(std::to_string(count) + " " + state);
    if (count > common_count) common = state, common_count = count;
  }
  std::optional<int64_t> median_step = median(steps), median_age = median(ages);
  summary = std::to_string(ranks.size()) + " ranks: " + join(counts, ", ");
  if (!steps.empty()) {
    summary += "; step min " + std::to_string(*std::min_element(steps.begin(), steps.end())) + ", median " +
               std::to_string(*median_step) + ", max " + std::to_string(*std::max_element(steps.begin(), steps.end()));
  }
  if (median_age) summary += "; median beat age " + short_age(*median_age);
  std::vector<const RunSnapshot::Rank*> out;
  size_t standing_out = 0;
  for (const RunSnapshot::Rank& rank : ranks) {
    const std::optional<int64_t>& step = rank.step;
    const std::optional<int64_t>& beat = rank.last_beat_ms;
    bool odd_state = or_unknown(rank.state, "-") != common;
    bool behind = median_step && step && *step < *median_step;
    bool silent = median_age && beat && age_reference - *beat > std::max<int64_t>(3 * *median_age, 2000);
    if (!odd_state && !behind && !silent) continue;
    ++standing_out;
    if (out.size() < kStandoutRanks) out.push_back(&rank);
  }
  summary += "; " + std::to_string(standing_out) + " stand out (not " + common + ", behind the median step, or silent)";
  if (standing_out > out.size()) summary += ", the first " + std::to_string(out.size()) + " below";
  summary += " (--all lists every rank)";
  return out;
}

/// What the run found of its hosts before using them: their software stacks (spec consistency,
/// what differs side by side), their health checks (spec health; those with something to say)
/// and the hosts it quarantined. Without `all`, the first 8 health lines and how many more.
void print_host_findings(const RunSnapshot& state, bool all) {
  // The hosts' software stacks (spec consistency), and what differs side by side.
  for (const events::StackConsistency& stack : state.stack) {
    print_field("stack", printable(stack.text(), 400));
    if (stack.differences.empty()) continue;
    for (const std::string& line : events::stack_difference_table(stack.differences)) print_field("", "  " + printable(line, 300));
  }
  // The hosts' health checks (spec health): those with something to say, by name.
  std::vector<std::string> health = events::health_lines(state.health);
  constexpr size_t kHealthLines = 8;
  for (size_t i = 0; i < health.size() && (all || i < kHealthLines); ++i) {
    print_field(i == 0 ? "health" : "", printable(health[i], 400));
  }
  if (!all && health.size() > kHealthLines) {
    print_field("", "... " + std::to_string(health.size() - kHealthLines) + " more (--all lists them)");
  }
  if (!state.quarantined.empty()) {
    print_field("quarantined", join(state.quarantined, ", ") + " (kept out of later runs; dtrain hosts release HOST)");
  }
}

/// The acceptable recovery and target the run's spec.yaml states (intent:, dtrain-spec(5)), in
/// one line; "" without an intent or a spec that loads.
std::string intent_text(const RunDirectory& run) {
  spec::LoadResult loaded = spec::load_job_spec(run.spec_path(), {}, spec::EnvValues::names_only);
  if (!loaded.ok() || !loaded.spec->intent.given) return "";
  const spec::IntentSettings& intent = loaded.spec->intent;
  std::string text = std::string("recovery ") + spec::to_string(intent.mode);
  if (intent.max_recovery.count() > 0) text += " within " + format_duration(intent.max_recovery);
  if (intent.max_lost_steps > 0) text += ", at most " + std::to_string(intent.max_lost_steps) + " steps lost";
  if (intent.max_lost_time.count() > 0) text += ", at most " + format_duration(intent.max_lost_time) + " lost";
  if (intent.target_duration.count() > 0) text += "; target " + format_duration(intent.target_duration);
  return text + " (graded in `dtrain report`)";
}

void print_run_text(const RunDirectory& run, const RunSnapshot& state, bool alive, const Result<PlanRecord>& plan,
                    const std::vector<LoggedEvent>& events, const std::string& events_error, bool all) {
  int64_t now = now_ms();
  std::string shown = display_state(state, alive);
  std::string supervisor_pid = state.supervisor ? std::to_string(state.supervisor->pid) : "-";
  if (shown == "supervisor gone") {
    shown += " (last recorded state " + recorded_state(state) + "; supervisor pid " + supervisor_pid +
             " no longer runs, so the run ended without a final state; `dtrain resume " + run.id() +
             "` continues it from its newest checkpoint)";
  } else if (state.exit_code) {
    shown += " (exit " + std::to_string(*state.exit_code) + ")";
  }
  print_field("run", run.id());
  print_field("name", or_unknown(state.name, "-"));
  if (!state.tenant.empty()) print_field("tenant", state.tenant);
  print_field("state", shown);
  const std::optional<int64_t>& submitted = state.submitted_at_ms;
  const std::optional<int64_t>& finished = state.finished_at_ms;
  if (submitted) {
    std::string started = local_datetime(*submitted);
    if (finished) started += " (ran " + human_duration(*finished - *submitted) + ")";
    else if (alive) started += " (running for " + human_duration(now - *submitted) + ")";
    print_field("started", started);
  }
  if (state.resumed_at_ms) {
    print_field("resumed", local_datetime(*state.resumed_at_ms) + " by `dtrain resume` (supervisor pid " +
                               supervisor_pid + ")");
  }
  print_field("generation",
              std::to_string(state.generation) + " (restarts: " + std::to_string(state.restarts) + ")");
  print_field("world size", std::to_string(state.world_size));
  if (!all && state.hosts.size() > kHostsListed) {
    print_field("hosts", hosts_summary(state.hosts));
  } else {
    std::vector<std::string> hosts;
    for (const RunSnapshot::Host& host : state.hosts) {
      hosts.push_back(or_unknown(host.name, "?") + " (" + or_unknown(host.state, "?") + ")");
    }
    print_field("hosts", hosts.empty() ? "-" : join(hosts, ", "));
  }
  if (!state.excluded_hosts.empty()) print_field("excluded", join(state.excluded_hosts, ", "));
  print_plan(run, plan, all);
  if (const std::optional<RunSnapshot::RootCause>& cause = state.root_cause) {
    // A run that recovered still names what went wrong, but it is no longer "the" cause.
    bool failed = state.state == "failed";
    std::string where = cause->rank ? "rank " + std::to_string(*cause->rank) + " on " + or_unknown(cause->host, "?") +
                                          " (local rank " + opt_int(cause->local_rank) + ", pid " +
                                          opt_int(cause->pid) + ")"
                                    : events::to_string(cause->kind) + " on " + or_unknown(cause->host, "?");
    print_field(failed ? "root cause" : "last failure", where + ": " + or_unknown(cause->message, "?"));
    if (cause->log && !cause->log->empty()) print_field("", "log: " + *cause->log);
    // From the rank's TORCHELASTIC_ERROR_FILE: its innermost frames (the whole one: state.json).
    if (cause->traceback && !cause->traceback->empty()) {
      std::vector<std::string> lines = split(*cause->traceback, '\n');
      while (!lines.empty() && lines.back().empty()) lines.pop_back();
      print_field("", "traceback (last lines):");
      for (size_t i = lines.size() > 6 ? lines.size() - 6 : 0; i < lines.size(); ++i) print_field("", "  " + printable(lines[i], 300));
    }
  }
  if (state.last_recovery) print_field("recovery", recovery_text(*state.last_recovery));
  if (std::string intent = intent_text(run); !intent.empty()) print_field("intent", intent);
  // The hang timeouts in force: an auto one says what it was set from.
  if (state.hang_timeout) print_field("hang timeout", printable(state.hang_timeout->text(), 300));
  print_host_findings(state, all);
  // Ranks slower than the fastest (metrics.straggler_threshold): the first few, by name.
  if (!state.stragglers.empty()) print_field("stragglers", stragglers_text(state));
  if (std::string split = step_split_text(state); !split.empty()) print_field("step split", split);

  // Heartbeat ages are measured against the end of the run once it has one.
  int64_t age_reference = finished.value_or(alive ? now : state.updated_at_ms.value_or(now));
  if (!state.ranks.empty()) {
    std::printf("\n");
    std::vector<const RunSnapshot::Rank*> listed;
    if (!all && state.ranks.size() > kRanksListed) {
      std::string summary;
      listed = standout_ranks(state.ranks, age_reference, summary);
      std::printf("%s\n", printable(summary).c_str());
    } else {
      for (const RunSnapshot::Rank& rank : state.ranks) listed.push_back(&rank);
    }
    // A beat metric's column (kInStatusTable) when a listed rank reported it.
    std::vector<const contract::BeatMetric*> columns;
    for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
      if ((metric.shown & contract::kInStatusTable) == 0) continue;
      if (std::any_of(listed.begin(), listed.end(), [&](const RunSnapshot::Rank* rank) {
            return (rank->metrics.*metric.field).has_value();
          })) {
        columns.push_back(&metric);
      }
    }
    std::vector<std::string> header = {"RANK", "HOST", "LOCAL", "PID", "STATE", "BEAT AGE", "STEP"};
    for (const contract::BeatMetric* metric : columns) header.emplace_back(metric->column);
    header.emplace_back("EXIT");
    std::vector<std::vector<std::string>> rows = {std::move(header)};
    for (const RunSnapshot::Rank* rank : listed) {
      const std::optional<int64_t>& beat = rank->last_beat_ms;
      std::vector<std::string>& row = rows.emplace_back(std::vector<std::string>{
          std::to_string(rank->rank), or_unknown(rank->host, "-"), std::to_string(rank->local_rank), opt_int(rank->pid),
          or_unknown(rank->state, "-"), beat ? short_age(age_reference - *beat) : "-", opt_int(rank->step)});
      for (const contract::BeatMetric* metric : columns) row.push_back(metric_text(*metric, rank->metrics.*metric->field));
      row.push_back(exit_text(rank->exit));
    }
    print_table(rows);
  }

  if (!events.empty() || !events_error.empty()) {
    std::printf("\nlast %zu events:\n", events.size());
    for (const LoggedEvent& event : events) std::printf("  %s\n", printable(compact_event(event)).c_str());
    if (!events_error.empty()) std::printf("  (event log: %s)\n", events_error.c_str());
  }
  std::printf("\n");
  print_field("run dir", run.path());
  print_field("events", run.events_path());
  print_field("supervisor", run.supervisor_log_path());
  print_field("rank logs", run.ranks_dir() + "/<rank>.log  (dtrain logs " + run.id() + ")");
}

int show_run(const std::string& id, bool as_json, int event_count, bool all) {
  Result<RunDirectory> run = RunDirectory::open(id);
  if (!run) {
    std::fprintf(stderr, "dtrain status: %s\n", run.error().message.c_str());
    return exit_code_for(run.error());
  }
  Result<RunSnapshot> state = read_state(*run);
  if (!state) {
    std::fprintf(stderr, "dtrain status: run %s: %s\n", run->id().c_str(), state.error().message.c_str());
    return exit_code_for(state.error());
  }
  bool alive = supervisor_alive(*state);
  std::vector<LoggedEvent> events;
  std::string events_error;
  if (event_count > 0) {
    // A corrupt line (a disk that filled mid-append, a hand edit) is skipped, never fatal:
    // a few warnings on stderr, the rest of the history on stdout.
    constexpr int kWarningsShown = 5;
    int skipped = 0;
    auto warn = [&skipped](const EventLineError& line) {
      if (++skipped <= kWarningsShown) std::fprintf(stderr, "dtrain status: warning: %s\n", line.message().c_str());
    };
    // From the end of the file: a run of 16,384 ranks writes millions of events.
    Result<std::vector<LoggedEvent>> last =
        read_last_logged_events(run->events_path(), static_cast<size_t>(event_count), warn);
    if (skipped > kWarningsShown) {
      std::fprintf(stderr, "dtrain status: warning: %d more corrupt lines skipped in %s\n",
                   skipped - kWarningsShown, run->events_path().c_str());
    }
    if (last) {
      events = std::move(*last);
    } else {
      events_error = last.error().message;
    }
  }
  // The plan of the generation state.json names; before generation 0 starts there is none.
  int generation = std::max(0, state->generation);
  Result<PlanRecord> plan = read_plan_record(*run, generation, as_json ? PlanJson::keep : PlanJson::drop);
  if (as_json) {
    json shown_events = json::array();
    for (const LoggedEvent& event : events) shown_events.push_back(to_json(event));
    json out = {{"state", state->to_json()}, {"supervisor_alive", alive}, {"events", std::move(shown_events)},
                {"plan_generation", generation}, {"plan", plan ? plan->json : json()}};
    if (plan) {
      std::string change = plan_history_text(*run, *plan);
      out["plan_change"] = change.empty() ? json() : json(change);
    } else {
      out["plan_error"] = plan.error().message;
    }
    if (!events_error.empty()) out["events_error"] = events_error;
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  print_run_text(*run, *state, alive, plan, events, events_error, all);
  return 0;
}

// ---- --watch ------------------------------------------------------------------------------------

/// The number of steps the job will train, when the run says: state.json's total_steps, else a
/// --steps N (or --max-steps, --total-steps, --num-steps, --train-steps; "=N" too) in the
/// worker command of the run's spec.yaml. nullopt when neither does.
std::optional<int64_t> total_steps(const RunDirectory& run, const RunSnapshot& state) {
  if (state.total_steps && *state.total_steps > 0) return state.total_steps;
  spec::LoadResult spec = spec::load_job_spec(run.spec_path(), {}, spec::EnvValues::names_only);
  if (!spec.ok()) return std::nullopt;
  static const std::vector<std::string> flags = {"--steps", "--max-steps", "--max_steps", "--total-steps",
                                                 "--num-steps", "--train-steps"};
  const std::vector<std::string>& argv = spec.spec->worker.command;
  for (size_t i = 0; i < argv.size(); ++i) {
    for (const std::string& flag : flags) {
      std::string value;
      if (argv[i] == flag && i + 1 < argv.size()) value = argv[i + 1];
      else if (argv[i].rfind(flag + "=", 0) == 0) value = argv[i].substr(flag.size() + 1);
      if (value.empty() || value.size() > 15 || value.find_first_not_of("0123456789") != std::string::npos) continue;
      return std::stoll(value);
    }
  }
  return std::nullopt;
}

struct WatchSample {
  int64_t at_ms = 0;
  int64_t step = -1;
};

/// One refresh: the lines to print, and whether the run is over.
std::vector<std::string> watch_block(const RunDirectory& run, const RunSnapshot& state, bool alive,
                                     std::optional<int64_t> total, const WatchSample& previous,
                                     WatchSample& current, double interval_s) {
  std::vector<std::string> lines;
  auto field = [&](const char* label, const std::string& value) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "%-11s ", label);
    lines.push_back(buffer + value);
  };
  lines.push_back("dtrain status --watch " + run.id() + "   every " + plain(json(interval_s)) + "s, Ctrl-C to stop   " +
                  local_datetime(current.at_ms));
  std::string shown = display_state(state, alive);
  if (state.exit_code) shown += " (exit " + std::to_string(*state.exit_code) + ")";
  field("state", shown);
  field("generation", std::to_string(state.generation) + " (restarts: " + std::to_string(state.restarts) +
                          "), world size " + std::to_string(state.world_size));
  int64_t step = -1, running = 0, ranks = 0;
  std::optional<double> loss;
  for (const RunSnapshot::Rank& rank : state.ranks) {
    ++ranks;
    if (rank.state == "running") ++running;
    if (rank.step && *rank.step > step) {
      step = *rank.step;
      loss = rank.metrics.loss;
    }
  }
  current.step = step;
  std::string step_text = step >= 0 ? std::to_string(step) : "-";
  if (total) step_text += " of " + std::to_string(*total);
  if (loss) step_text += ", loss " + plain(json(*loss));
  field("step", step_text + " (" + std::to_string(running) + " of " + std::to_string(ranks) + " ranks running)");
  // The rate between the last two refreshes: what the run does now, not its lifetime average.
  std::string rate = "-", eta = "-";
  if (previous.step >= 0 && step >= previous.step && current.at_ms > previous.at_ms) {
    double per_second = static_cast<double>(step - previous.step) * 1000.0 / static_cast<double>(current.at_ms - previous.at_ms);
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2f steps/s", per_second);
    rate = buffer;
    if (total && per_second > 0 && *total > step) {
      eta = human_duration(static_cast<int64_t>(static_cast<double>(*total - step) / per_second * 1000.0));
    } else if (total && step >= *total) {
      eta = "done";
    }
  }
  field("rate", rate + (total ? "   ETA " + eta : "   ETA - (no step count in the spec)"));
  field("stragglers", stragglers_text(state));
  if (std::string split = step_split_text(state); !split.empty()) field("step split", split);
  Result<std::vector<LoggedEvent>> last = read_last_logged_events(run.events_path(), 1);
  field("last event", last && !last->empty() ? compact_event(last->back()) : last ? "-" : last.error().message);
  return lines;
}

int watch_run(const std::string& id, double interval_s) {
  Result<RunDirectory> run = RunDirectory::open(id);
  if (!run) {
    std::fprintf(stderr, "dtrain status: %s\n", run.error().message.c_str());
    return exit_code_for(run.error());
  }
  bool terminal_output = ::isatty(STDOUT_FILENO) == 1;
  std::optional<int64_t> total;
  bool total_looked_up = false;
  WatchSample previous;
  // A run just submitted may not have written state.json yet: wait for it a while, but not for
  // ever (a supervisor that died before writing one never will).
  constexpr int64_t kStateWaitMs = 10'000;
  std::optional<int64_t> state_missing_since;
  for (;;) {
    Result<RunSnapshot> state = read_state(*run);
    if (!state) {
      if (!state_missing_since) state_missing_since = now_ms();
      if (now_ms() - *state_missing_since > kStateWaitMs) {
        std::fprintf(stderr, "dtrain status: run %s: %s\n", run->id().c_str(), state.error().message.c_str());
        return exit_code_for(state.error());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(200, static_cast<int64_t>(interval_s * 1000))));
      continue;
    }
    state_missing_since.reset();
    if (!total_looked_up) {
      total = total_steps(*run, *state);
      total_looked_up = true;
    }
    bool alive = supervisor_alive(*state);
    WatchSample current{now_ms(), -1};
    std::vector<std::string> lines = watch_block(*run, *state, alive, total, previous, current, interval_s);
    // A terminal is redrawn in place (cursor home, clear); a pipe or file gets one block per refresh.
    std::string block = terminal_output ? "\033[H\033[2J" : "";
    for (const std::string& line : lines) block += printable(line) + "\n";
    if (!terminal_output) block += "\n";
    std::fputs(block.c_str(), stdout);
    std::fflush(stdout);
    // The run is over when its state is final, or when nobody is left to change it.
    if (is_terminal_state(state->state) || !alive) {
      std::printf("%s\n", alive || is_terminal_state(state->state)
                              ? "the run has ended"
                              : "the supervisor is gone; the run will not change (dtrain resume continues it)");
      return 0;
    }
    previous = current;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)));
  }
}

}  // namespace

void add_status_command(CLI::App& app, CommandContext& context) {
  struct Options {
    std::string run;
    bool json = false;
    int events = 10;
    bool all = false;
    bool watch = false;
    double interval = 2.0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "status", "List runs, or show one run: state, plan, ranks, root cause, recent events");
  command->add_option("run", options->run, "Run id or a unique prefix of one (omit to list all runs)");
  command->add_flag("--json", options->json, "Print JSON: {state, supervisor_alive, events, plan, plan_generation, plan_change} for a run, an array of runs otherwise");
  command->add_option("--events", options->events, "How many recent events to show for a run (default 10)")
      ->check(CLI::NonNegativeNumber);
  command->add_flag("--all", options->all,
                    "List every host and rank (past 32 hosts / 64 ranks the text view summarises: hosts by "
                    "state, and only the ranks that stand out)");
  command->add_flag("--watch", options->watch,
                    "Refresh the run's step, rate, ETA, stragglers and last event until it ends (Ctrl-C stops)");
  command->add_option("--interval", options->interval, "Seconds between --watch refreshes (default 2)")
      ->check(CLI::Range(0.1, 3600.0));
  command->callback([options, &context] {
    if (options->watch) {
      if (options->run.empty() || options->json) {
        std::fprintf(stderr, "dtrain status: --watch needs a RUN and does not take --json\n");
        context.exit_code = to_int(ExitCode::usage);
        return;
      }
      context.exit_code = watch_run(options->run, options->interval);
      return;
    }
    context.exit_code = options->run.empty() ? list_runs(options->json)
                                             : show_run(options->run, options->json, options->events, options->all);
  });
}

}  // namespace dtrain::cli
