#include "launcher/drill/spec_drill.h"

#include <algorithm>
#include <thread>

#include <signal.h>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"
#include "launcher/base/child_process.h"
#include "launcher/drill/drill_history.h"
#include "launcher/drill/injector.h"
#include "launcher/drill/intent_objectives.h"
#include "launcher/drill/run_processes.h"
#include "launcher/runlog/control_client.h"
#include "launcher/runlog/run_state.h"
#include "launcher/events/events.h"

namespace dtrain::drill {

using nlohmann::json;

namespace {

constexpr Millis kSubmitTimeout{60'000};
constexpr Millis kStopTimeout{60'000};
constexpr Millis kCleanupGrace{10'000};

Deadline deadline_after(Millis timeout) { return std::chrono::steady_clock::now() + timeout; }

std::string current_state(const LiveRun& run) {
  return recorded_state(run.state());
}

// Log the verdict to the run and the history; a failure to do so is said, not fatal: the
// verdict still reaches the operator on stdout.
void finish(DrillReport& report, const LiveRun* run, const Say& say) {
  report.finished_wall_ms = SystemClock().wall_ms();
  if (run) {
    Status appended = run->append(events::DrillVerdict{to_json(report)}.to_json());
    if (!appended && say) say("warning: " + appended.error().message);
  }
  if (Status saved = append_drill_history(drill_history_path(), report); !saved && say) {
    say("warning: " + saved.error().message);
  }
}

// The drill's objectives completed from the run's own intent (its spec.yaml); `note` says which
// came from there, or why none could.
Objectives objectives_of_run(const Objectives& drill, const LiveRun& run, std::string& note) {
  RunIntent read = read_run_intent(run.directory().spec_path());
  if (!read.intent) {
    note = read.note;
    return drill;
  }
  Objectives objectives = with_intent(drill, *read.intent);
  note = intent_note(objectives);
  return objectives;
}

std::optional<double> step_ms_of(const LiveRun& run) {
  Result<RunSnapshot> state = run.state();
  return state ? median_step_ms(*state) : std::nullopt;
}

}  // namespace

std::string make_drill_id() {
  std::string id = make_run_id("drill", SystemClock().wall_ms());
  return id;
}

Result<DrillReport> run_live_drill(const LiveDrillPlan& plan, const Say& say) {
  Result<LiveRun> run = LiveRun::open(plan.run);
  if (!run) return run.error();
  if (Status fits = check_fault_fits(*run, plan.fault); !fits) return fits.error();
  DrillReport report;
  report.drill_id = make_drill_id();
  report.mode = "live";
  report.run_id = run->id();
  report.objectives = objectives_of_run(plan.objectives, *run, report.objectives_note);
  report.started_wall_ms = SystemClock().wall_ms();

  Result<FaultRecord> record = inject_and_follow(*run, plan.fault, deadline_after(plan.timeout), say);
  if (!record) {
    report.error = record.error().message;
  } else {
    GradeContext context = record->context();
    context.final_state = current_state(*run);
    context.step_ms = step_ms_of(*run);
    report.faults.push_back(grade_fault(record->injection, record->events_after, report.objectives, context));
  }
  report.final_state = current_state(*run);
  finish(report, &*run, say);
  return report;
}

namespace {

// Start the job as `dtrain submit --detach`, a child of the drill; its stdout is the run id.
Result<std::string> submit_job(const SpecDrillPlan& plan, const Say& say) {
  std::vector<std::string> argv = {plan.dtrain_exe, "submit", plan.job_path, "--detach"};
  for (const std::string& set : plan.sets) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  for (const Fault& fault : plan.faults) {
    if (fault.kind == FaultKind::slow_storage) {
      argv.push_back("--set");
      argv.push_back("worker.env.DTRAIN_FAULT_CKPT_DELAY_MS=" + std::to_string(fault.delay.count()));
    }
  }
  if (say) say("starting the job: " + join(argv, " "));
  Result<CommandOutput> output = run_command(argv, kSubmitTimeout);
  if (!output) return output.error();
  std::string run_id(trim(output->out));
  if (output->exit_code != 0 || run_id.empty() || run_id.find('\n') != std::string::npos) {
    std::string why = "`dtrain submit " + plan.job_path + " --detach` failed (exit " +
                        std::to_string(output->exit_code) + "): " + std::string(trim(output->err));
    return output->exit_code == 2 ? Error::user(why) : Error::infra(why);
  }
  return run_id;
}

// Stop the run if it still runs, then prove that nothing of it is left; whatever is, the drill
// reports and then kills, since it started the job.
void clean_up(DrillReport& report, LiveRun& run, const Say& say) {
  Result<RunSnapshot> state = run.state();
  if (state && not_live_reason(*state).empty()) {
    if (say) say("stopping " + run.id());
    Result<ControlReply> reply = send_control(run.directory(), ControlRequest{ControlRequestType::stop}, Millis(10'000));
    if (!reply && say) say("warning: could not ask " + run.id() + " to stop: " + reply.error().message);
    report.final_state = wait_for_run_end(run, deadline_after(kStopTimeout));
  }
  // The supervisor records the final state before its last events (run.finished) and exits
  // after them: wait for it too, so the run's log is whole when the drill reports.
  Deadline supervisor_deadline = deadline_after(kStopTimeout);
  for (;;) {
    Result<RunSnapshot> now = run.state();
    if (!now || !supervisor_alive(*now) || std::chrono::steady_clock::now() >= supervisor_deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  report.cleanup_checked = true;
  report.leftover_pids = wait_until_run_gone(run.id(), kCleanupGrace);
  for (int pid : report.leftover_pids) (void)send_signal(run, pid, SIGKILL);
}

}  // namespace

DrillReport run_spec_drill(const SpecDrillPlan& plan, const Say& say) {
  DrillReport report;
  report.drill_id = plan.drill_id.empty() ? make_drill_id() : plan.drill_id;
  report.mode = "spec";
  report.spec_path = plan.spec_path;
  report.objectives = plan.objectives;
  report.started_wall_ms = SystemClock().wall_ms();
  Deadline deadline = deadline_after(plan.timeout);

  Result<std::string> run_id = submit_job(plan, say);
  if (!run_id) {
    report.error = run_id.error().message;
    report.error_is_usage = run_id.error().kind == ErrorKind::user;
    finish(report, nullptr, say);
    return report;
  }
  report.run_id = *run_id;
  if (say) say("run " + *run_id + " started");
  // `submit --detach` returns once the run directory exists; state.json follows shortly.
  Result<LiveRun> opened = LiveRun::open(*run_id);
  while (!opened && std::chrono::steady_clock::now() < deadline && !cancel_requested() &&
         opened.error().message.find("no state yet") != std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    opened = LiveRun::open(*run_id);
  }
  if (!opened) {
    report.error = opened.error().message;
    report.cleanup_checked = true;
    report.leftover_pids = wait_until_run_gone(*run_id, kCleanupGrace);
    finish(report, nullptr, say);
    return report;
  }
  LiveRun& run = *opened;
  int64_t job_started_wall_ms = report.started_wall_ms;
  report.objectives = objectives_of_run(plan.objectives, run, report.objectives_note);

  std::vector<FaultRecord> records;
  std::vector<size_t> slow_storage;  // indexes into plan.faults, graded over the whole run
  for (size_t i = 0; i < plan.faults.size() && !report.error; ++i) {
    const Fault& fault = plan.faults[i];
    if (fault.kind == FaultKind::slow_storage) {
      slow_storage.push_back(i);
      continue;
    }
    if (Status fits = check_fault_fits(run, fault); !fits) {
      report.error = fits.error().message;
      break;
    }
    Result<FaultRecord> record = inject_and_follow(run, fault, deadline, say);
    if (!record) {
      report.error = record.error().message;
      break;
    }
    records.push_back(std::move(record).value());
    if (!records.back().recovered) break;  // nothing left to drill into
  }

  if (!report.error) {
    if (say) say("letting " + run.id() + " finish");
    report.final_state = wait_for_run_end(run, deadline);
  }
  clean_up(report, run, say);
  (void)run.poll();
  if (report.final_state.empty()) report.final_state = current_state(run);

  // Each fault is graded on the run as its recovery left it; whether the whole job then
  // succeeded is the report's own check (DrillReport::passed).
  std::optional<double> step_ms = step_ms_of(run);
  for (FaultRecord& record : records) {
    GradeContext context = record.context();
    context.step_ms = step_ms;
    report.faults.push_back(grade_fault(record.injection, record.events_after, report.objectives, context));
  }
  GradeContext context;
  context.final_state = report.final_state;
  context.require_success = true;
  context.step_ms = step_ms;
  for (size_t index : slow_storage) {
    Injection injection;
    injection.fault = plan.faults[index];
    injection.wall_ms = job_started_wall_ms;
    injection.generation = 0;
    context.surviving_pids.clear();
    report.faults.push_back(grade_fault(injection, run.events(), report.objectives, context));
  }
  finish(report, &run, say);
  return report;
}

}  // namespace dtrain::drill
