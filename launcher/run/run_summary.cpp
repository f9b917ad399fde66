// The end of a run as a person reads it: the run.finished event (state, exit code, restarts,
// incidents, root cause) and, in the foreground, a summary on stdout (success) or stderr: the
// root cause with its log, traceback and last output, why the run could not go on, every
// incident, and where the run log is. What a worker wrote is shown printable(): an escape
// sequence in an error message must not retitle or rewrite the operator's terminal.

#include "launcher/run/run_summary.h"

#include <algorithm>
#include <cstdio>

#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/events/events.h"

namespace dtrain::run {

using nlohmann::json;
using supervisor::RunState;

// The traceback from the rank's error file, its last lines (the innermost frames and the
// exception): the whole one is in events.jsonl (failure.detected) and state.json.
namespace {

void print_traceback(std::FILE* out, const std::string& traceback) {
  constexpr size_t kShownLines = 12;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < traceback.size()) {
    size_t end = traceback.find('\n', start);
    if (end == std::string::npos) end = traceback.size();
    lines.push_back(traceback.substr(start, end - start));
    start = end + 1;
  }
  std::fprintf(out, "  traceback (from its error file):\n");
  if (lines.size() > kShownLines) std::fprintf(out, "    ...\n");
  for (size_t i = lines.size() > kShownLines ? lines.size() - kShownLines : 0; i < lines.size(); ++i) {
    std::fprintf(out, "    %s\n", printable(lines[i]).c_str());
  }
}

}  // namespace

events::RunFinished run_finished_event(const supervisor::Supervisor& supervisor, const supervisor::FinishRun& finish,
                                       int64_t elapsed_ms) {
  events::RunFinished finished{supervisor::to_string(finish.state), to_int(finish.exit_code), supervisor.restarts(),
                               supervisor.generation() + 1, elapsed_ms, supervisor.incidents()};
  if (const auto& cause = supervisor.root_cause()) {
    // The summary's own short form: rank even when there is none (-1), no pid or code.
    finished.root_cause = events::RunRootCause{cause->kind, cause->host, cause->rank, cause->detail, cause->traceback};
  }
  finished.reason = supervisor.give_up_reason();
  return finished;
}

void print_run_summary(std::FILE* out, const supervisor::Supervisor& supervisor, const supervisor::FinishRun& finish,
                       const RunDirectory& run, const FrameRouter& router, int64_t elapsed_ms,
                       const WorkerEcho& echo) {
  // Rounded to 100 ms past a second; a run that ended at once shows its real milliseconds,
  // not "0ms".
  elapsed_ms = std::max<int64_t>(1, elapsed_ms);
  std::string duration = format_duration(Millis(elapsed_ms < 1000 ? elapsed_ms : elapsed_ms / 100 * 100));
  std::fprintf(out, "dtrain: run %s %s after %s (exit %d)\n", run.id().c_str(),
               supervisor::to_string(finish.state), duration.c_str(), to_int(finish.exit_code));
  if (const auto& cause = supervisor.root_cause(); cause && finish.state == RunState::failed) {
    std::fprintf(out, "root cause: ");
    if (cause->rank >= 0) {
      std::fprintf(out, "rank %d (local rank %d) on host %s, pid %d: %s\n", cause->rank,
                   cause->local_rank, printable(cause->host).c_str(), cause->pid, printable(cause->detail).c_str());
      std::fprintf(out, "  log: %s\n", run.rank_log_path(cause->rank).c_str());
      if (cause->traceback) print_traceback(out, *cause->traceback);
      const std::vector<std::string>* tail = router.exit_tail(cause->rank);
      if (tail && !tail->empty()) {
        std::fprintf(out, "  last output:\n");
        for (size_t i = tail->size() > 5 ? tail->size() - 5 : 0; i < tail->size(); ++i) {
          std::fprintf(out, "    %s\n", printable((*tail)[i]).c_str());
        }
      }
    } else {
      std::fprintf(out, "%s on host %s: %s\n", printable(events::to_string(cause->kind)).c_str(), printable(cause->host).c_str(),
                   printable(cause->detail).c_str());
    }
  }
  if (finish.state == RunState::preempted) {
    int64_t step = supervisor.latest_checkpoint_step();
    std::fprintf(out, "preempted: %s; `dtrain resume %s` continues from %s\n", printable(supervisor.stop_reason()).c_str(),
                 run.id().c_str(), step >= 0 ? ("checkpoint step " + std::to_string(step)).c_str() : "the start (no checkpoint)");
  }
  if (finish.state == RunState::failed && !supervisor.give_up_reason().empty()) {
    std::fprintf(out, "cannot continue: %s\n", printable(supervisor.give_up_reason()).c_str());
  }
  if (supervisor.incidents().size() > 1 || supervisor.restarts() > 0) {
    std::fprintf(out, "incidents (%zu), restarts %d:\n", supervisor.incidents().size(),
                 supervisor.restarts());
    for (const json& incident : supervisor.incidents()) {
      std::fprintf(out, "  gen %d: %s on %s%s: %s\n", incident.value("gen", 0),
                   printable(incident.value("kind", "")).c_str(), printable(incident.value("host", "")).c_str(),
                   incident.contains("rank") ? (" rank " + std::to_string(incident.value("rank", -1))).c_str() : "",
                   printable(incident.value("detail", "")).c_str());
    }
  }
  std::fprintf(out, "run log: %s\n  dtrain status %s · dtrain logs %s\n", run.path().c_str(), run.id().c_str(),
               run.id().c_str());
  if (echo.choice != OutputChoice::none && !echo.shows_every_rank()) {
    std::fprintf(out, "output shown here: %s; every rank's: dtrain logs %s\n", echo.describe().c_str(),
                 run.id().c_str());
  }
}

}  // namespace dtrain::run
