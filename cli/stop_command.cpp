// `dtrain stop RUN [--checkpoint] [--timeout 60s]`: asks the run's supervisor (over ctl.sock) to
// stop the run the way Ctrl-C would — or, with --checkpoint, the way a preemption (SIGTERM) does:
// every rank saves one step first — then waits for state.json to say it has ended.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/run/governance.h"
#include "launcher/runlog/control_client.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::cli {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);

std::string state_and_exit(const RunSnapshot& state) {
  std::string text = "state " + recorded_state(state);
  if (state.exit_code) text += ", exit " + std::to_string(*state.exit_code);
  return text;
}

std::string supervisor_pid(const RunSnapshot& state) {
  return state.supervisor ? std::to_string(state.supervisor->pid) : "?";
}

/// One audit row per `dtrain stop`, written when its request was answered (or found needless):
/// the action is the request, whether or not the run has ended by the time the command returns.
void audit_stop(const std::string& run_id, const std::string& timeout_text, const std::string& result,
                bool checkpoint = false) {
  run::audit_action("dtrain stop", "stop", run_id, "", {{"timeout", timeout_text}, {"checkpoint", checkpoint}}, result);
}

/// --checkpoint without --timeout: long enough for the run's own preemption (preempt_grace to
/// save, stop_grace to stop) and 30 s more; 2m when its spec cannot be read.
std::string preemption_timeout(const RunDirectory& run) {
  spec::LoadResult loaded = spec::load_job_spec(run.spec_path());
  if (!loaded.ok()) return "2m";
  return format_duration(loaded.spec->preempt_grace + loaded.spec->stop_grace + Millis(30'000));
}

/// Exit 0 with a message when the run is over already (or nobody is left to stop it).
std::optional<int> report_if_ended(const RunDirectory& run, const RunSnapshot& state,
                                   const std::string& timeout_text) {
  if (is_terminal_state(state.state)) {
    std::printf("run %s already ended (%s)\n", run.id().c_str(), state_and_exit(state).c_str());
    audit_stop(run.id(), timeout_text, "nothing to stop: already ended (" + state_and_exit(state) + ")");
    return 0;
  }
  if (!supervisor_alive(state)) {
    std::printf("run %s has no supervisor any more (pid %s is gone; last recorded state %s); "
                "nothing to stop\n",
                run.id().c_str(), supervisor_pid(state).c_str(), recorded_state(state).c_str());
    audit_stop(run.id(), timeout_text, "nothing to stop: supervisor pid " + supervisor_pid(state) + " is gone");
    return 0;
  }
  return std::nullopt;
}

int stop_run(const std::string& id, std::string timeout_text, bool checkpoint) {
  Result<RunDirectory> run = RunDirectory::open(id);
  if (!run) {
    std::fprintf(stderr, "dtrain stop: %s\n", run.error().message.c_str());
    return exit_code_for(run.error());
  }
  if (timeout_text.empty()) timeout_text = checkpoint ? preemption_timeout(*run) : "60s";
  Result<Millis> timeout = parse_duration(timeout_text);
  if (!timeout) {
    std::fprintf(stderr, "dtrain stop: --timeout: %s\n", timeout.error().message.c_str());
    return to_int(ExitCode::usage);
  }
  Result<RunSnapshot> state = read_state(*run);
  if (!state) {
    std::fprintf(stderr, "dtrain stop: run %s: %s\n", run->id().c_str(), state.error().message.c_str());
    return exit_code_for(state.error());
  }
  if (std::optional<int> ended = report_if_ended(*run, *state, timeout_text)) return *ended;

  const auto deadline = std::chrono::steady_clock::now() + *timeout;
  Millis request_timeout = std::min<Millis>(*timeout, Millis(10'000));
  Result<ControlReply> reply = send_control(*run, ControlRequest{ControlRequestType::stop, checkpoint}, request_timeout);
  if (!reply) {
    // The run may have ended between reading its state and connecting.
    if (Result<RunSnapshot> again = read_state(*run); again) {
      if (std::optional<int> ended = report_if_ended(*run, *again, timeout_text)) return *ended;
    }
    audit_stop(run->id(), timeout_text, "failed: " + reply.error().message, checkpoint);
    std::fprintf(stderr,
                 "dtrain stop: run %s: %s\n  its supervisor (pid %s) still runs; stop it with `kill -%s %s`, which "
                 "dtrain handles like `dtrain stop%s`\n",
                 run->id().c_str(), reply.error().message.c_str(), supervisor_pid(*state).c_str(),
                 checkpoint ? "TERM" : "INT", supervisor_pid(*state).c_str(), checkpoint ? " --checkpoint" : "");
    return exit_code_for(reply.error());
  }
  std::fprintf(stderr, checkpoint ? "stopping %s after every rank saves one step ...\n" : "stopping %s ...\n",
               run->id().c_str());
  audit_stop(run->id(), timeout_text,
             std::string(checkpoint ? "stop after a checkpoint" : "stop") + " requested; the supervisor (pid " +
                 supervisor_pid(*state) + ") acknowledged",
             checkpoint);

  std::string last_state = recorded_state(*state);
  for (;;) {
    Result<RunSnapshot> now = read_state(*run);
    if (now) {
      last_state = recorded_state(*now);
      // The supervisor's state turns terminal while it still tears the run down; the run has
      // ended once the exit code is recorded (or the supervisor is gone).
      if (is_terminal_state(last_state) && (now->exit_code || !supervisor_alive(*now))) {
        std::printf("stopped %s (%s)\n", run->id().c_str(), state_and_exit(*now).c_str());
        return 0;
      }
      if (!supervisor_alive(*now)) {
        std::fprintf(stderr, "dtrain stop: run %s: the supervisor (pid %s) exited without recording a final state "
                             "(last state %s); see %s\n",
                     run->id().c_str(), supervisor_pid(*now).c_str(), last_state.c_str(),
                     run->supervisor_log_path().c_str());
        return to_int(ExitCode::infra);
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  std::fprintf(stderr,
               "dtrain stop: run %s is still in state %s after %s; wait longer with `dtrain stop %s "
               "--timeout 5m`, or end it with `kill -KILL %s` (its agents then kill their workers)\n",
               run->id().c_str(), last_state.c_str(), timeout_text.c_str(), run->id().c_str(),
               supervisor_pid(*state).c_str());
  return to_int(ExitCode::infra);
}

}  // namespace

void add_stop_command(CLI::App& app, CommandContext& context) {
  struct Options {
    std::string run;
    std::string timeout;  ///< empty: 60s, or with --checkpoint the run's preempt_grace + stop_grace + 30s
    bool checkpoint = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("stop", "Stop a run (like Ctrl-C on `dtrain submit`) and wait until it has ended");
  command->add_option("run", options->run, "Run id or a unique prefix of one")->required();
  command->add_flag("--checkpoint", options->checkpoint,
                    "Stop like a preemption (SIGTERM): every rank saves one step first (preempt_grace), the run "
                    "ends preempted and `dtrain resume` continues from that step");
  command->add_option("--timeout", options->timeout,
                      "How long to wait for the run to end (default 60s; with --checkpoint the run's preempt_grace + "
                      "stop_grace + 30s)");
  command->callback([options, &context] {
    context.exit_code = stop_run(options->run, options->timeout, options->checkpoint);
  });
}

}  // namespace dtrain::cli
