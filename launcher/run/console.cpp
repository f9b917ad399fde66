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

}  // namespace

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

void Console::finish() {
  clear_live_line();
  std::fflush(out_);
}

}  // namespace dtrain::run
