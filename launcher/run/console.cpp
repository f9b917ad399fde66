#include "launcher/run/console.h"

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"

namespace dtrain::run {

namespace {

std::string render(const ConsoleStatus& status) {
  char buffer[256];
  int n = std::snprintf(buffer, sizeof buffer, "%s · gen %d · %d/%d workers", status.state.c_str(),
                        status.generation, status.workers_running, status.world_size);
  if (status.step >= 0 && n > 0 && static_cast<size_t>(n) < sizeof buffer) {
    n += std::snprintf(buffer + n, sizeof buffer - static_cast<size_t>(n), " · step %lld",
                       static_cast<long long>(status.step));
    if (status.has_loss && static_cast<size_t>(n) < sizeof buffer) {
      std::snprintf(buffer + n, sizeof buffer - static_cast<size_t>(n), " loss %.4f", status.loss);
    }
  }
  return buffer;
}

std::string clock_time(int64_t wall_ms) {
  // "23:41:02" in UTC, like the event log.
  return format_timestamp_utc(wall_ms).substr(11, 12);
}

/// The length of an SGR sequence (ESC [ digits and semicolons m: colours, bold) at the start of
/// `text`, or 0: the one escape sequence a worker's line may send to the terminal.
size_t sgr_length(std::string_view text) {
  if (text.size() < 3 || text[0] != '\033' || text[1] != '[') return 0;
  for (size_t i = 2; i < text.size() && i < 64; ++i) {
    char c = text[i];
    if (c == 'm') return i + 1;
    if (!((c >= '0' && c <= '9') || c == ';')) return 0;
  }
  return 0;
}

}  // namespace

std::optional<OutputChoice> parse_output_choice(std::string_view text) {
  if (text == "auto") return OutputChoice::automatic;
  if (text == "all") return OutputChoice::all;
  if (text == "rank0" || text == "0") return OutputChoice::rank0;
  if (text == "none") return OutputChoice::none;
  return std::nullopt;
}

const char* to_string(OutputChoice choice) {
  switch (choice) {
    case OutputChoice::automatic: return "auto";
    case OutputChoice::all: return "all";
    case OutputChoice::rank0: return "rank0";
    case OutputChoice::none: return "none";
  }
  return "none";
}

bool WorkerEcho::shows(int rank) const {
  switch (choice) {
    case OutputChoice::all: return true;
    case OutputChoice::rank0: return rank == 0;
    case OutputChoice::none: return false;
    case OutputChoice::automatic: return world_size <= kEveryRankUpTo || rank == 0;
  }
  return false;
}

bool WorkerEcho::shows_every_rank() const {
  return choice == OutputChoice::all || (choice == OutputChoice::automatic && world_size <= kEveryRankUpTo) ||
         (choice == OutputChoice::rank0 && world_size <= 1);
}

std::string WorkerEcho::describe() const {
  std::string ranks = std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks");
  if (choice == OutputChoice::none) return "none (--output all or rank0 to see it here)";
  if (shows_every_rank()) return world_size == 1 ? "rank 0" : "all " + ranks;
  std::string why = choice == OutputChoice::automatic ? "more than " + std::to_string(kEveryRankUpTo) + " ranks; " : "";
  return "rank 0 of " + ranks + " (" + why + "--output all for every rank)";
}

std::string terminal_line(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF
  if (size_t cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);
  std::string shown;
  size_t plain_from = 0;  // the start of the run of bytes that printable() takes care of
  auto flush_plain = [&](size_t end) { shown += printable(line.substr(plain_from, end - plain_from)); };
  for (size_t i = 0; i < line.size();) {
    size_t keep = line[i] == '\t' ? 1 : sgr_length(line.substr(i));
    if (keep == 0) {
      ++i;
      continue;
    }
    flush_plain(i);
    shown.append(line.substr(i, keep));
    i += keep;
    plain_from = i;
  }
  flush_plain(line.size());
  return shown;
}

void Console::clear_live_line() {
  if (live_line_shown_) {
    std::fputs("\r\033[K", out_);
    live_line_shown_ = false;
  }
}

void Console::line(int64_t wall_ms, const std::string& text) {
  if (mode_ == Mode::quiet) return;
  clear_live_line();
  // Lines carry what workers and agents said (failure details, protocol errors): printable only.
  std::fprintf(out_, "%s %s\n", clock_time(wall_ms).c_str(), printable(text).c_str());
  std::fflush(out_);
}

void Console::status(int64_t now_ms, int64_t wall_ms, const ConsoleStatus& status) {
  if (mode_ == Mode::quiet) return;
  std::string text = render(status);
  if (mode_ == Mode::terminal) {
    if (text == last_text_ && live_line_shown_) return;
    if (now_ms - last_status_ms_ < 200 && live_line_shown_) return;
    std::fprintf(out_, "\r\033[K%s", text.c_str());
    live_line_shown_ = true;
  } else {
    if (now_ms - last_status_ms_ < 10'000 || text == last_text_) return;
    std::fprintf(out_, "%s %s\n", clock_time(wall_ms).c_str(), text.c_str());
  }
  std::fflush(out_);
  last_text_ = text;
  last_status_ms_ = now_ms;
}

void Console::worker_line(int rank, std::string_view stream, std::string_view line) {
  if (mode_ == Mode::quiet || !echo_.shows(rank)) return;
  std::FILE* to = stream == "stderr" ? echo_.err : echo_.out;
  clear_live_line();  // the status line is redrawn under the output at the next status
  std::string text = terminal_line(line);
  // A colour left on by the worker must not paint our next line: reset after an SGR.
  bool coloured = text.find("\033[") != std::string::npos;
  std::fprintf(to, "[rank %d] %s%s\n", rank, text.c_str(), coloured ? "\033[0m" : "");
  std::fflush(to);
}

void Console::finish() {
  clear_live_line();
  std::fflush(out_);
}

}  // namespace dtrain::run
