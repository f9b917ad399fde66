// `dtrain resume RUN`: check that the run may be resumed (exists, did not succeed, no live
// supervisor: its lock, then its state), wait out the old agents' fence, find the newest complete
// checkpoint and the hosts, and run a driver from there in the same run directory.

#include <unistd.h>

#include <cstdio>
#include <thread>

#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/run/created_pods.h"
#include "launcher/run/driver.h"
#include "launcher/run/governance.h"
#include "launcher/run/quarantine_gate.h"
#include "launcher/registry/registry_db.h"
#include "launcher/run/resume_point.h"
#include "launcher/runlog/run_state.h"
#include "launcher/events/events.h"

namespace dtrain::run {



int resume(const ResumeOptions& options) {
  SystemClock clock;
  // Every refusal is one audit row too: who tried to resume what, and why not.
  auto refuse = [&options](const std::string& message, ExitCode code = ExitCode::usage) {
    std::fprintf(stderr, "dtrain resume: %s\n", message.c_str());
    audit_action("dtrain resume", "resume", options.run, "", {{"detach", options.detach}}, "refused: " + message);
    return to_int(code);
  };
  Result<RunDirectory> run = RunDirectory::open(options.run);
  if (!run) return refuse(run.error().message);
  // Before anything is written in the run directory, and held until this process ends: a
  // second resume (or a live submit's supervisor) is refused here, naming the holder.
  Result<RunLock> lock = RunLock::acquire(*run);
  if (!lock) return refuse(lock.error().message, lock.error().kind == ErrorKind::user ? ExitCode::usage : ExitCode::infra);
  Result<RunSnapshot> state = read_state(*run);
  if (!state) return refuse("cannot read the run's state: " + state.error().message, ExitCode::infra);
  std::string previous_state = recorded_state(*state);
  int previous_pid = state->supervisor ? state->supervisor->pid : 0;
  std::string previous_host = state->supervisor ? state->supervisor->hostname : "";
  bool terminal = is_terminal_state(previous_state);
  if (previous_state == "succeeded") {
    return refuse("run " + run->id() + " already succeeded; nothing to resume (submit the spec again for a new run)");
  }
  if (!terminal && supervisor_alive(*state)) {
    if (!previous_host.empty() && previous_host != this_hostname()) {
      return refuse("run " + run->id() + " is supervised from host " + previous_host + " (pid " +
                    std::to_string(previous_pid) + "); whether it still runs can only be checked there: "
                    "run `dtrain resume " + run->id() + "` on " + previous_host);
    }
    return refuse("run " + run->id() + " is still supervised by pid " + std::to_string(previous_pid) +
                  " (state " + previous_state + "); nothing to resume. `dtrain stop " + run->id() +
                  "` ends it");
  }

  spec::LoadResult loaded = spec::load_job_spec(run->spec_path(), {});
  // The env_file is read again and pass_env taken from this process's environment: the run
  // directory keeps neither's values (man 5 dtrain-spec, SECRETS).
  if (!loaded.ok()) return refuse("the run's saved spec cannot be loaded:\n" + loaded.message());
  for (const spec::Diagnostic& warning : loaded.warnings) {
    std::fprintf(stderr, "dtrain resume: warning: %s\n", warning.to_string().c_str());
  }
  spec::JobSpec spec = std::move(*loaded.spec);
  // kubernetes.job: the pods of the run's last attempt were deleted at its end (or are being
  // deleted now, when its supervisor died): fresh ones, under names of their own.
  ResumedPods pods;
  if (spec.kubernetes.job && spec.hosts.empty()) {
    Result<ResumedPods> recreated = recreate_pods_as_hosts(spec, *run);
    if (!recreated) {
      return refuse(recreated.error().message, recreated.error().kind == ErrorKind::user ? ExitCode::usage : ExitCode::infra);
    }
    pods = std::move(recreated).value();
  }
  QuarantineGate quarantine = read_quarantine_gate(spec, registry::registry_path(), clock.wall_ms());
  print_quarantine_gate(quarantine, "dtrain resume");
  Result<plan::RankPlan> plan = plan_without_quarantined(spec, quarantine);
  if (!plan) return refuse(run->spec_path() + ": " + plan.error().message);
  Admission admission = admit_under_quota(spec, options.over_quota, "dtrain resume", "resume", IntentPolicy::not_applicable);
  if (admission.refused_exit_code) return *admission.refused_exit_code;

  // A corrupt line (a full disk, a hand edit) is skipped with a warning; the rest still counts.
  Result<std::vector<LoggedEvent>> events = read_logged_events(run->events_path(), [](const EventLineError& skipped) {
    std::fprintf(stderr, "dtrain resume: warning: %s\n", skipped.message().c_str());
  });
  if (!events) return refuse("cannot read the run log: " + events.error().message, ExitCode::infra);
  supervisor::ResumeFrom from = resume_point(*state, *events);
  int64_t started_wall = clock.wall_ms();
  if (from.supervisor_lost) {
    if (Status gone = wait_until_old_agents_gone(*run, spec, from.last_seen_wall_ms); !gone) {
      return refuse(gone.error().message, ExitCode::infra);
    }
  }
  from.waited_ms = clock.wall_ms() - started_wall;

  Result<EventLog> log = EventLog::open_existing(run->events_path());
  if (!log) return refuse(log.error().message, ExitCode::infra);
  int64_t resume_step = from.committed_steps.empty() ? -1 : from.committed_steps.back();
  events::RunResumed resumed{previous_state,
                             previous_pid,
                             previous_host,
                             from.waited_ms,
                             resume_step,
                             from.last_generation + 1,
                             ::getpid(),
                             this_hostname(),
                             kVersion,
                             options.detach};
  (void)log->append(resumed.to_json(), clock.wall_ms());
  for (const events::KubernetesDeleted& deleted : pods.cleared) (void)log->append(deleted.to_json(), clock.wall_ms());
  if (pods.created) (void)log->append(created_event(*pods.created, spec.kubernetes.job->pods).to_json(), clock.wall_ms());
  if (!quarantine.left_out.empty()) (void)log->append(quarantine.event().to_json(), clock.wall_ms());
  std::string resume_text = resume_step >= 0 ? "checkpoint step " + std::to_string(resume_step) : "the start (no checkpoint)";
  audit_action("dtrain resume", "resume", run->id(), "",
               {{"detach", options.detach}, {"over_quota", options.over_quota}, {"previous_state", previous_state}},
               "resumed from " + resume_text + (admission.quota_note.empty() ? "" : "; " + admission.quota_note), &spec);
  if (options.detach) {
    if (std::optional<int> parent_exit = detach(run->id(), ("resumed from " + resume_text).c_str(), *lock)) {
      if (pods.created) pods.created->release();  // the background supervisor deletes them
      return *parent_exit;
    }
  } else {
    std::string why = terminal ? "it had " + previous_state
                               : "its supervisor, pid " + std::to_string(previous_pid) + " on " + previous_host + ", died";
    std::fprintf(stderr, "dtrain: resuming run %s (%s) from %s · %d workers on %zu host(s) · run log %s%s\n",
                 run->id().c_str(), why.c_str(), resume_text.c_str(), plan->world_size, plan->hosts.size(),
                 run->path().c_str(), output_clause(WorkerEcho{options.output, plan->world_size}).c_str());
  }
  WorkerEcho echo{options.output, plan->world_size};
  int64_t submitted = state->submitted_at_ms.value_or(clock.wall_ms());
  RunDriver driver(spec, std::move(plan).value(), std::move(run).value(), std::move(log).value(),
                   options.dtrain_exe, options.detach, Console(console_mode(options.detach), stderr, echo), DriverSeams{});
  if (pods.created) driver.own_created_job(std::move(*pods.created));
  driver.resume_from(from, submitted);
  int code = driver.run();
  if (options.detach) std::_Exit(code);
  return code;
}

}  // namespace dtrain::run
