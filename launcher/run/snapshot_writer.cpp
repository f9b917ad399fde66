// SnapshotWriter (snapshot_writer.h): state.json, metrics.jsonl and the console's live status,
// each built from the supervisor's view and handed to the recorder, which writes it off the loop.

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "launcher/base/exit_code.h"
#include "launcher/runlog/run_state.h"
#include "launcher/run/snapshot_writer.h"

namespace dtrain::run {

using nlohmann::json;

SnapshotWriter::SnapshotWriter(const spec::JobSpec& spec, const RunDirectory& run,
                               const supervisor::Supervisor& supervisor, const RankProgressTable& progress,
                               const AgentLinks& links, const FrameRouter& router, const MetricsExporter& metrics,
                               const RunTimes& times, RunRecorder& recorder, const Clock& clock, std::string hostname,
                               bool detached)
    : spec_(spec),
      run_(run),
      supervisor_(supervisor),
      progress_(progress),
      links_(links),
      router_(router),
      metrics_(metrics),
      times_(times),
      recorder_(recorder),
      clock_(clock),
      hostname_(std::move(hostname)),
      detached_(detached) {}

void SnapshotWriter::write_state(bool force, const std::optional<supervisor::FinishRun>& finished) {
  int64_t now = clock_.monotonic_ms();
  std::string state_name = supervisor::to_string(supervisor_.state());
  if (!force && state_name == last_state_name_ && now - last_state_write_ms_ < state_write_spacing_ms_) return;
  last_state_write_ms_ = now;
  last_state_name_ = state_name;

  const plan::RankPlan& plan = supervisor_.current_plan();
  RunSnapshot snapshot;
  std::vector<spec::HostEntry> all_hosts = spec_.hosts;
  all_hosts.insert(all_hosts.end(), spec_.spares.begin(), spec_.spares.end());
  for (const spec::HostEntry& host : all_hosts) {
    RunSnapshot::Host& entry = snapshot.hosts.emplace_back();
    entry.name = host.name;
    entry.state = "connecting";
    entry.spare = host.spare;
    auto link = links_.find(host.name);
    if (supervisor_.excluded_hosts().count(host.name)) entry.state = "excluded";
    else if (link == links_.end() || link->second->lost) entry.state = "lost";
    else if (link->second->connected) entry.state = "connected";
    if (link != links_.end() && link->second->connection().local_pid()) {
      entry.agent_pid = *link->second->connection().local_pid();
    }
  }
  snapshot.ranks = progress_.state_rows(supervisor_);
  if (const auto& cause = supervisor_.root_cause()) {
    RunSnapshot::RootCause& root = snapshot.root_cause.emplace();
    root.kind = cause->kind;
    root.host = cause->host;
    root.message = cause->detail;
    if (cause->rank >= 0) {
      root.rank = cause->rank;
      root.local_rank = cause->local_rank;
      root.log = run_.rank_log_path(cause->rank);
    }
    if (cause->pid) root.pid = cause->pid;
    root.code = cause->code;
    root.signal = cause->signal;
    root.traceback = cause->traceback;
  }
  snapshot.run_id = run_.id();
  snapshot.name = spec_.name;
  snapshot.tenant = spec_.tenant;
  snapshot.state = state_name;
  if (finished) snapshot.exit_code = to_int(finished->exit_code);
  snapshot.generation = std::max(0, supervisor_.generation());
  snapshot.world_size = plan.world_size;
  snapshot.restarts = supervisor_.restarts();
  snapshot.excluded_hosts.assign(supervisor_.excluded_hosts().begin(), supervisor_.excluded_hosts().end());
  snapshot.supervisor = RunSnapshot::Supervisor{::getpid(), hostname_,
                                                times_.resumed_wall_ms.value_or(times_.submitted_wall_ms),
                                                current_process_start_ticks()};
  snapshot.submitted_at_ms = times_.submitted_wall_ms;
  snapshot.resumed_at_ms = times_.resumed_wall_ms;
  if (finished) snapshot.finished_at_ms = clock_.wall_ms();
  snapshot.updated_at_ms = clock_.wall_ms();
  if (const std::optional<supervisor::Supervisor::CompletedRecovery>& recovery = supervisor_.last_recovery()) {
    snapshot.last_recovery = RunSnapshot::Recovery{recovery->gen, recovery->completed};
  }
  if (router_.last_checkpoint_step() >= 0) snapshot.last_checkpoint_step = router_.last_checkpoint_step();
  if (supervisor_.generation() >= 0) snapshot.hang_timeout = supervisor_.hang_timeouts().in_force();
  snapshot.stack = supervisor_.stack_verdicts();
  snapshot.health.clear();
  for (const auto& [host, health] : supervisor_.host_health()) snapshot.health.push_back(health);
  snapshot.quarantined = supervisor_.quarantined_hosts();
  snapshot.spec_path = run_.spec_path();
  snapshot.detached = detached_;
  // Stragglers now (dtrain status shows them) and the goodput so far.
  const auto& statuses = supervisor_.ranks();
  for (size_t i = 0; i < statuses.size() && i < plan.ranks.size(); ++i) {
    if (!metrics_.stragglers().is_straggler(static_cast<int>(i))) continue;
    snapshot.stragglers.push_back({plan.ranks[i].rank, plan.ranks[i].host,
                                   metrics_.stragglers().score(static_cast<int>(i)).value_or(1.0),
                                   metrics_.stragglers().median_ms(static_cast<int>(i)).value_or(0.0)});
  }
  snapshot.goodput = metrics_.goodput().at(clock_.wall_ms()).to_json();
  recorder_.state(std::move(snapshot));
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
void SnapshotWriter::write_metrics(bool force) {
  int64_t now = clock_.monotonic_ms();
  if (!force && now - last_metrics_ms_ < 5000) return;
  std::optional<json> ranks = progress_.metrics_line(supervisor_, kMetricsDetailRanks);
  if (!ranks) return;
  last_metrics_ms_ = now;
  json line = {{"ts", format_timestamp_utc(clock_.wall_ms())}, {"gen", supervisor_.generation()}};
  line.update(*ranks);
  recorder_.metrics(std::move(line));
}

void SnapshotWriter::show_status() {
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
