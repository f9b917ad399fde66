#pragma once
// What `dtrain submit` shows in the foreground: on a terminal one live status line (state,
// generation, workers running, newest step/loss); otherwise plain timestamped lines. Detached
// supervisors show nothing (everything is in the run directory). With --output (dtrain run's
// default, `dtrain submit --follow`), the chosen ranks' output too, each line prefixed
// "[rank N] " the way torchrun --tee and mpirun --tag-output show it: a worker's stdout on ours,
// its stderr on ours.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain::run {

struct ConsoleStatus {
  std::string state;
  int generation = 0;
  int workers_running = 0;
  int world_size = 0;
  int64_t step = -1;
  double loss = 0;
  bool has_loss = false;
};

/// Which ranks' output the terminal shows (--output). `automatic`: every rank up to
/// kEveryRankUpTo ranks, rank 0 beyond — a wall of 64 interleaved copies of one loss line
/// helps nobody, and every rank's output is in the run directory (dtrain logs).
enum class OutputChoice { automatic, all, rank0, none };
inline constexpr int kEveryRankUpTo = 8;
/// "auto", "all", "rank0" (also "0"), "none"; nullopt for anything else.
std::optional<OutputChoice> parse_output_choice(std::string_view text);
const char* to_string(OutputChoice choice);

/// The ranks' output on the terminal: which ranks, and where their two streams go.
struct WorkerEcho {
  OutputChoice choice = OutputChoice::none;
  int world_size = 0;  ///< of the first plan: `automatic` decides on it once, for the whole run
  std::FILE* out = stdout;
  std::FILE* err = stderr;
  bool shows(int rank) const;
  /// For the start and end of the run: "all 4 ranks", "rank 0 of 16 (--output all for every
  /// rank)", "none (--output none)".
  std::string describe() const;
  /// False when some rank's output is not shown: the summary then says where it is.
  bool shows_every_rank() const;
};

/// What a worker's line becomes on a terminal: what the terminal would show of it after its
/// last carriage return (a progress bar's newest state), colours (SGR) kept, every other control
/// character escaped — a line from a worker must not move the cursor over our status line,
/// retitle the window or clear the screen.
std::string terminal_line(std::string_view line);

class Console {
 public:
  enum class Mode { terminal, plain, quiet };
  Console(Mode mode, std::FILE* out, WorkerEcho echo = {}) : mode_(mode), out_(out), echo_(echo) {}

  /// A notable moment (state change, failure): its own line in every mode but quiet.
  void line(int64_t wall_ms, const std::string& text);
  /// The live status; redrawn on a terminal at most every 200 ms, printed every 10 s otherwise.
  void status(int64_t now_ms, int64_t wall_ms, const ConsoleStatus& status);
  /// A line of rank `rank`'s output (`stream` "stdout" or "stderr", without its newline), shown
  /// when the echo chooses the rank, prefixed "[rank N] ".
  void worker_line(int rank, std::string_view stream, std::string_view line);
  /// Ends the live line so that what follows starts on a fresh line.
  void finish();
  Mode mode() const { return mode_; }
  const WorkerEcho& echo() const { return echo_; }

 private:
  void clear_live_line();
  Mode mode_;
  std::FILE* out_;
  WorkerEcho echo_;
  bool live_line_shown_ = false;
  int64_t last_status_ms_ = 0;
  std::string last_text_;
};

}  // namespace dtrain::run
