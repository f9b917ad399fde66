#include "launcher/runlog/state_writer.h"

#include "launcher/runlog/run_state.h"

#include <pthread.h>

#include <charconv>
#include <chrono>
#include <cmath>

#include "launcher/base/fd.h"

namespace dtrain {

namespace {

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest round trip
  out.append(buffer, error == std::errc() ? end : buffer);
}

void append_integer(std::string& out, int64_t value) {
  char buffer[24];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, error == std::errc() ? end : buffer);
}

void append_string(std::string& out, std::string_view value) {
  // Host names and state names are plain ASCII: quoted as they are. Anything else (a quote,
  // a control character, non-ASCII that may be invalid UTF-8) goes through nlohmann's escaping.
  bool plain = true;
  for (unsigned char c : value) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (!plain) {
    out += nlohmann::json(std::string(value)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out += '"';
  out += value;
  out += '"';
}

/// Appends the rows to `out` in place: each copy of a 16,384-rank text (3.5 MB) costs page
/// faults, which are slow on virtual machines (100 ms per snapshot with three copies).
void append_rank_rows(std::string& out, const std::vector<StateRankRow>& rows) {
  auto key = [&](const char* name) {
    out += ", \"";
    out += name;
    out += "\": ";
  };
  // Absent values are JSON null (the schema's "unknown"), as run_state.h documents.
  auto integer_or_null = [&](const char* name, bool present, int64_t value) {
    key(name);
    if (present) append_integer(out, value);
    else out += "null";
  };
  out += "[";
  bool first = true;
  for (const StateRankRow& row : rows) {
    out += first ? "\n    {\"rank\": " : ",\n    {\"rank\": ";
    first = false;
    append_integer(out, row.rank);
    key("host");
    append_string(out, row.host);
    integer_or_null("local_rank", true, row.local_rank);
    integer_or_null("dp", true, row.dp);
    integer_or_null("pp", true, row.pp);
    integer_or_null("tp", true, row.tp);
    integer_or_null("pid", row.pid != 0, row.pid);
    key("state");
    append_string(out, row.state);
    integer_or_null("step", row.step >= 0, row.step);
    integer_or_null("last_beat_ms", row.last_beat_ms != 0, row.last_beat_ms);
    key("loss");
    if (row.loss) append_number(out, *row.loss);
    else out += "null";
    if (row.step_ms) {
      key("step_ms");
      append_number(out, *row.step_ms);
    }
    key("exit");
    if (row.exit_signal) {
      out += "{\"signal\": ";
      append_string(out, *row.exit_signal);
      out += "}";
    } else if (row.exit_code) {
      out += "{\"code\": ";
      append_integer(out, *row.exit_code);
      out += "}";
    } else {
      out += "null";
    }
    out += "}";
  }
  out += rows.empty() ? "]" : "\n  ]";
}

}  // namespace

std::string rank_rows_json(const std::vector<StateRankRow>& rows) {
  std::string out;
  out.reserve(rows.size() * 240 + 8);
  append_rank_rows(out, rows);
  return out;
}

std::string state_json_text(const nlohmann::json& head, const std::vector<StateRankRow>& rows) {
  nlohmann::json top = head.is_object() ? head : nlohmann::json::object();
  top.erase("ranks");
  if (!top.contains("version")) top["version"] = kRunStateVersion;
  std::string text = top.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  // "{\n  ...\n}": "ranks" goes in before the closing brace, into the same buffer.
  text.resize(text.size() - 2);  // "\n}"
  text.reserve(text.size() + rows.size() * 240 + 32);
  text += ",\n  \"ranks\": ";
  append_rank_rows(text, rows);
  text += "\n}\n";
  return text;
}

StateWriter::StateWriter(std::string state_path) : path_(std::move(state_path)), thread_([this] { run(); }) {}

StateWriter::~StateWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StateWriter::submit(nlohmann::json state) {
  {
    std::lock_guard lock(mutex_);
    pending_ = Snapshot{std::move(state), std::nullopt};
  }
  changed_.notify_all();
}

void StateWriter::submit(nlohmann::json head, std::vector<StateRankRow> ranks) {
  {
    std::lock_guard lock(mutex_);
    pending_ = Snapshot{std::move(head), std::move(ranks)};
  }
  changed_.notify_all();
}

Status StateWriter::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !pending_ && !writing_; });
  return last_;
}

void StateWriter::run() {
  ::pthread_setname_np(::pthread_self(), "dtrain-state");  // top -H, perf and gdb name it
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return pending_ || stopping_; });
    if (!pending_) return;  // stopping, nothing left to write
    Snapshot snapshot = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lock.unlock();
    Status written;
    if (snapshot.ranks) {
      // Only the serialising is timed: it is CPU, which the caller paces. The write and its
      // fsyncs are waiting, and a slow disk must not make state.json go stale (at 50x a 200 ms
      // fsync, status and drills would see the run 10 s late).
      auto started = std::chrono::steady_clock::now();
      std::string text = state_json_text(snapshot.head, *snapshot.ranks);
      last_text_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
                          .count();
      written = write_file_atomic(path_, text);
    } else {
      written = write_state_file(path_, snapshot.head);
    }
    lock.lock();
    writing_ = false;
    last_ = written;
    changed_.notify_all();
  }
}

}  // namespace dtrain
