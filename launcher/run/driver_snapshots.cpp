// What the driver shows of a run while it runs: state.json (for `dtrain status`), metrics.jsonl
// and the console's live status — each built from the supervisor's view and handed to the
// recorder, which writes it off the loop.

#include <unistd.h>

#include <algorithm>

#include "launcher/base/exit_code.h"
#include "launcher/runlog/run_state.h"
#include "launcher/run/driver.h"

namespace dtrain::run {

using nlohmann::json;

void RunDriver::write_state(bool force) {
  int64_t now = clock_.monotonic_ms();
  std::string state_name = supervisor::to_string(supervisor_.state());
  if (!force && state_name == last_state_name_ && now - last_state_write_ms_ < state_write_spacing_ms_) return;
  last_state_write_ms_ = now;
  last_state_name_ = state_name;

  const plan::RankPlan& plan = supervisor_.current_plan();
  json hosts = json::array();
  std::vector<spec::HostEntry> all_hosts = spec_.hosts;
  all_hosts.insert(all_hosts.end(), spec_.spares.begin(), spec_.spares.end());
  for (const spec::HostEntry& host : all_hosts) {
    std::string host_state = "connecting";
    auto link = links_.find(host.name);
    if (supervisor_.excluded_hosts().count(host.name)) host_state = "excluded";
    else if (link == links_.end() || link->second->lost) host_state = "lost";
    else if (link->second->connected) host_state = "connected";
    json entry = {{"name", host.name}, {"state", host_state}, {"spare", host.spare}};
    if (link != links_.end() && link->second->connection().local_pid()) {
      entry["agent_pid"] = *link->second->connection().local_pid();
    }
    hosts.push_back(entry);
  }
  std::vector<StateRankRow> ranks = progress_.state_rows(supervisor_);
  const auto& statuses = supervisor_.ranks();
  json root_cause = nullptr;
  if (const auto& cause = supervisor_.root_cause()) {
    root_cause = {{"kind", events::to_string(cause->kind)}, {"host", cause->host}, {"message", cause->detail}};
    if (cause->rank >= 0) {
      root_cause["rank"] = cause->rank;
      root_cause["local_rank"] = cause->local_rank;
      root_cause["log"] = run_.rank_log_path(cause->rank);
    }
    if (cause->pid) root_cause["pid"] = cause->pid;
    if (cause->code) root_cause["code"] = *cause->code;
    if (cause->signal) root_cause["signal"] = *cause->signal;
    if (cause->traceback) root_cause["traceback"] = *cause->traceback;
  }
  json state = {
      {"version", kRunStateVersion}, {"run_id", run_.id()}, {"name", spec_.name},
      {"tenant", spec_.tenant.empty() ? json(nullptr) : json(spec_.tenant)},
      {"state", state_name},
      {"exit_code", finished_ ? json(to_int(finished_->exit_code)) : json(nullptr)},
      {"generation", std::max(0, supervisor_.generation())}, {"world_size", plan.world_size},
      {"restarts", supervisor_.restarts()}, {"hosts", std::move(hosts)},
      {"excluded_hosts", json(std::vector<std::string>(supervisor_.excluded_hosts().begin(),
                                                       supervisor_.excluded_hosts().end()))},
      {"supervisor", {{"pid", ::getpid()}, {"hostname", hostname_},
                      {"started_at_ms", resumed_ ? resumed_wall_ms_ : submitted_wall_ms_},
                      {"proc_start_ticks", current_process_start_ticks()}}},
      {"submitted_at_ms", submitted_wall_ms_},
      {"resumed_at_ms", resumed_ ? json(resumed_wall_ms_) : json(nullptr)},
      {"finished_at_ms", finished_ ? json(clock_.wall_ms()) : json(nullptr)},
      {"updated_at_ms", clock_.wall_ms()},
      {"last_recovery", supervisor_.last_recovery().is_null() ? json(nullptr) : supervisor_.last_recovery()},
      {"last_checkpoint_step", router_.last_checkpoint_step() >= 0 ? json(router_.last_checkpoint_step()) : json(nullptr)},
      {"root_cause", root_cause}, {"spec_path", run_.spec_path()}, {"detached", detached_}};
  // Stragglers now (dtrain status shows them) and the goodput so far.
  json stragglers = json::array();
  for (size_t i = 0; i < statuses.size() && i < plan.ranks.size(); ++i) {
    if (!metrics_.stragglers().is_straggler(static_cast<int>(i))) continue;
    stragglers.push_back({{"rank", plan.ranks[i].rank}, {"host", plan.ranks[i].host},
                          {"score", metrics_.stragglers().score(static_cast<int>(i)).value_or(1.0)},
                          {"median_step_ms", metrics_.stragglers().median_ms(static_cast<int>(i)).value_or(0.0)}});
  }
  state["stragglers"] = std::move(stragglers);
  state["goodput"] = metrics_.goodput().at(clock_.wall_ms()).to_json();
  recorder_.state(std::move(state), std::move(ranks));
  // Copying the rows is O(ranks) on the loop and turning them into text O(ranks) on the state
  // thread (a few ms and 4-23 ms at 16,384 ranks): paced so that each takes at most ~1% of its
  // thread's CPU (at 2,048 hosts a snapshot every 1-2 s; at 2% the state thread alone was 2-2.7%
  // of the supervisor's ~11%). The write's fsyncs are not counted: a slow disk must not make
  // state.json stale. A change of the run's state is written at once whatever the pace.
  int64_t cost_ms = std::max(clock_.monotonic_ms() - now, recorder_.last_state_text_ms());
  state_write_spacing_ms_ = std::max<int64_t>(kStateWriteSpacingMs, 100 * cost_ms);
}

/// metrics.jsonl: every 5 s while workers report, and once at the end. Up to kMetricsDetailRanks
/// ranks, each rank's step, loss and step time; beyond that a summary (ranks reporting, min /
/// median / max of step, step time and loss) and only the ranks that stand out — lagging more
/// than one step behind the newest, or stepping 1.5 × slower than the median — at most
/// kMetricsDetailRanks of them, worst first: every rank every 5 s is ~1 MB at 16,384 ranks.
/// At RunRecorder::kMetricsMaxBytes the file becomes metrics.1.jsonl (replacing an older one).
void RunDriver::write_metrics(bool force) {
  int64_t now = clock_.monotonic_ms();
  if (!force && now - last_metrics_ms_ < 5000) return;
  std::optional<json> ranks = progress_.metrics_line(supervisor_, kMetricsDetailRanks);
  if (!ranks) return;
  last_metrics_ms_ = now;
  json line = {{"ts", format_timestamp_utc(clock_.wall_ms())}, {"gen", supervisor_.generation()}};
  line.update(*ranks);
  recorder_.metrics(std::move(line));
}

void RunDriver::show_status() {
  // The console redraws at most every 200 ms (Console::status): building the status walks every
  // rank, and at thousands of ranks doing it on every wakeup cost more than the rest of the loop.
  if (recorder_.console_mode() == Console::Mode::quiet) return;
  int64_t now = clock_.monotonic_ms();
  if (now - last_status_ms_ < 200) return;
  last_status_ms_ = now;
  ConsoleStatus status = progress_.console_status(supervisor_);
  recorder_.console_status(std::move(status));
}

}  // namespace dtrain::run
