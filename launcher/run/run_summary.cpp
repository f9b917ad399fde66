// The end of a run as a person reads it: the run.finished event (state, exit code, restarts,
// incidents, root cause) and, in the foreground, a summary on stdout (success) or stderr: the
// root cause with its log, traceback and last output, why the run could not go on, every
// incident, and where the run log is. What a worker wrote is shown printable(): an escape
// sequence in an error message must not retitle or rewrite the operator's terminal.

#include <cstdio>

#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/run/driver.h"
#include "launcher/base/events.h"

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

void RunDriver::print_summary(const supervisor::FinishRun& finish) {
  events::RunFinished finished{supervisor::to_string(finish.state), to_int(finish.exit_code), supervisor_.restarts(),
                               supervisor_.generation() + 1, clock_.wall_ms() - submitted_wall_ms_,
                               supervisor_.incidents()};
  if (const auto& cause = supervisor_.root_cause()) {
    // The summary's own short form: rank even when there is none (-1), no pid or code.
    finished.root_cause = json{{"kind", cause->kind}, {"host", cause->host}, {"rank", cause->rank},
                               {"detail", cause->detail}};
    if (cause->traceback) (*finished.root_cause)["traceback"] = *cause->traceback;
  }
  finished.reason = supervisor_.give_up_reason();
  record(finished.to_json());
  if (recorder_.console_mode() == Console::Mode::quiet) return;
  recorder_.flush();  // every console line first; the console is idle from here on
  recorder_.finish_console();
  // Rounded to 100 ms past a second; a run that ended at once shows its real milliseconds,
  // not "0ms".
  int64_t elapsed_ms = std::max<int64_t>(1, clock_.wall_ms() - submitted_wall_ms_);
  std::string duration = format_duration(Millis(elapsed_ms < 1000 ? elapsed_ms : elapsed_ms / 100 * 100));
  std::FILE* out = finish.exit_code == ExitCode::ok ? stdout : stderr;
  std::fprintf(out, "dtrain: run %s %s after %s (exit %d)\n", run_.id().c_str(),
               supervisor::to_string(finish.state), duration.c_str(), to_int(finish.exit_code));
  if (const auto& cause = supervisor_.root_cause(); cause && finish.state == RunState::failed) {
    std::fprintf(out, "root cause: ");
    if (cause->rank >= 0) {
      std::fprintf(out, "rank %d (local rank %d) on host %s, pid %d: %s\n", cause->rank,
                   cause->local_rank, printable(cause->host).c_str(), cause->pid, printable(cause->detail).c_str());
      std::fprintf(out, "  log: %s\n", log_path(cause->rank).c_str());
      if (cause->traceback) print_traceback(out, *cause->traceback);
      auto tail = exit_tails_.find(cause->rank);
      if (tail != exit_tails_.end() && tail->second.is_array() && !tail->second.empty()) {
        std::fprintf(out, "  last output:\n");
        size_t first = tail->second.size() > 5 ? tail->second.size() - 5 : 0;
        for (size_t i = first; i < tail->second.size(); ++i) {
          std::fprintf(out, "    %s\n", printable(tail->second[i].get<std::string>()).c_str());
        }
      }
    } else {
      std::fprintf(out, "%s on host %s: %s\n", printable(cause->kind).c_str(), printable(cause->host).c_str(),
                   printable(cause->detail).c_str());
    }
  }
  if (finish.state == RunState::failed && !supervisor_.give_up_reason().empty()) {
    std::fprintf(out, "cannot continue: %s\n", printable(supervisor_.give_up_reason()).c_str());
  }
  if (supervisor_.incidents().size() > 1 || supervisor_.restarts() > 0) {
    std::fprintf(out, "incidents (%zu), restarts %d:\n", supervisor_.incidents().size(),
                 supervisor_.restarts());
    for (const json& incident : supervisor_.incidents()) {
      std::fprintf(out, "  gen %d: %s on %s%s: %s\n", incident.value("gen", 0),
                   printable(incident.value("kind", "")).c_str(), printable(incident.value("host", "")).c_str(),
                   incident.contains("rank") ? (" rank " + std::to_string(incident.value("rank", -1))).c_str() : "",
                   printable(incident.value("detail", "")).c_str());
    }
  }
  std::fprintf(out, "run log: %s\n  dtrain status %s · dtrain logs %s\n", run_.path().c_str(),
               run_.id().c_str(), run_.id().c_str());
}

}  // namespace dtrain::run
