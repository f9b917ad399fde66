#pragma once
// What `dtrain submit` shows in the foreground: on a terminal one live status line (state,
// generation, workers running, newest step/loss); otherwise plain timestamped lines. Detached
// supervisors show nothing (everything is in the run directory).

#include <cstdint>
#include <cstdio>
#include <string>

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

class Console {
 public:
  enum class Mode { terminal, plain, quiet };
  Console(Mode mode, std::FILE* out) : mode_(mode), out_(out) {}

  /// A notable moment (state change, failure): its own line in every mode but quiet.
  void line(int64_t wall_ms, const std::string& text);
  /// The live status; redrawn on a terminal at most every 200 ms, printed every 10 s otherwise.
  void status(int64_t now_ms, int64_t wall_ms, const ConsoleStatus& status);
  /// Ends the live line so that what follows starts on a fresh line.
  void finish();
  Mode mode() const { return mode_; }

 private:
  void clear_live_line();
  Mode mode_;
  std::FILE* out_;
  bool live_line_shown_ = false;
  int64_t last_status_ms_ = 0;
  std::string last_text_;
};

}  // namespace dtrain::run
