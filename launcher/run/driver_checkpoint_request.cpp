// Checkpoints before a Slurm time limit: SIGUSR1 (sbatch --signal=B:USR1@T) or
// checkpoint.before_walltime makes the supervisor ask every worker for a checkpoint
// (ckpt.request in the worker protocol, worker/contract/wire.h) at one step all ranks reach.

#include <cmath>
#include <cstdlib>

#include "launcher/base/child_process.h"
#include "launcher/base/strings.h"
#include "launcher/proto/messages.h"
#include "launcher/base/events.h"
#include "launcher/run/driver.h"
#include "launcher/spec/slurm_allocation.h"
#include "worker/contract/wire.h"

namespace dtrain::run {

void RunDriver::request_checkpoints(const std::string& reason) {
  const int gen = supervisor_.generation();
  const auto& statuses = supervisor_.ranks();
  int64_t newest_step = -1;
  double fastest_step_ms = 0;
  for (size_t i = 0; i < statuses.size(); ++i) {
    newest_step = std::max(newest_step, statuses[i].step);
    if (i < metrics_.size() && metrics_[i].step_ms && *metrics_[i].step_ms > 0) {
      fastest_step_ms = fastest_step_ms == 0 ? *metrics_[i].step_ms : std::min(fastest_step_ms, *metrics_[i].step_ms);
    }
  }
  // Every rank must save the same step (a checkpoint is complete only with every shard of it).
  // Beats come at most once per heartbeat.interval, so a rank may be that far past its last
  // beat: the step asked for lies two intervals of the fastest rank's steps ahead, and two more.
  int64_t margin = 2;
  if (fastest_step_ms > 0) {
    margin += static_cast<int64_t>(std::ceil(2.0 * static_cast<double>(spec_.heartbeat.interval.count()) / fastest_step_ms));
  }
  const int64_t at_step = newest_step < 0 ? margin : newest_step + margin;
  nlohmann::json request = {{"type", contract::wire::kCkptRequest}, {"step", at_step}, {"reason", reason}};
  int asked = 0;
  for (const plan::RankSlot& slot : supervisor_.current_plan().ranks) {
    auto link = links_.find(slot.host);
    if (link == links_.end() || link->second->lost) continue;
    // Workers that never spoke the worker protocol (plain scripts) could not hear it.
    if (static_cast<size_t>(slot.rank) >= metrics_.size() || !metrics_[static_cast<size_t>(slot.rank)].speaks_protocol) {
      continue;
    }
    link->second->send({{"type", proto::msg::kToWorker}, {"gen", gen}, {"rank", slot.rank}, {"msg", request}});
    ++asked;
  }
  record(events::CheckpointRequested{gen, reason, at_step, asked}.to_json());
  recorder_.console_line("checkpoint requested (" + reason + "): " + std::to_string(asked) + " worker" +
                         (asked == 1 ? "" : "s") + " asked to save step " + std::to_string(at_step));
}

void RunDriver::check_walltime() {
  if (spec_.checkpoint.before_walltime.count() <= 0 || walltime_request_done_) return;
  const int64_t now = clock_.monotonic_ms();
  if (!walltime_deadline_ms_) {
    // Once, at the first tick: the job's time left from Slurm itself (squeue), so that a limit
    // changed with scontrol before the start is the one used.
    walltime_request_done_ = true;  // unless the lookup below succeeds
    const char* job = std::getenv("SLURM_JOB_ID");
    if (job == nullptr || *job == '\0') {
      log().warn("checkpoint.before_walltime is set but this is not a Slurm job (no SLURM_JOB_ID): ignored");
      return;
    }
    Result<CommandOutput> left = run_command({"squeue", "-h", "-j", job, "-o", "%L"}, Millis(10'000));
    std::optional<int64_t> left_ms = left && left->exit_code == 0 ? spec::parse_slurm_time_left_ms(left->out)
                                                                  : std::nullopt;
    if (!left_ms) {
      log().warn("checkpoint.before_walltime: no time limit known for Slurm job {} ({}): only SIGUSR1 will ask for a "
                 "checkpoint",
                 job, left ? "squeue printed '" + std::string(trim(left->out)) + "'" : left.error().message);
      return;
    }
    walltime_request_done_ = false;
    walltime_deadline_ms_ = now + *left_ms - spec_.checkpoint.before_walltime.count();
    log().info("Slurm job {}: {} s left; checkpoint requested {} s before the limit", job, *left_ms / 1000,
               spec_.checkpoint.before_walltime.count() / 1000);
  }
  if (now >= *walltime_deadline_ms_) {
    walltime_request_done_ = true;
    request_checkpoints("checkpoint.before_walltime: " + format_duration(spec_.checkpoint.before_walltime) +
                        " before the Slurm time limit");
  }
}

}  // namespace dtrain::run
