#include "launcher/run/run_recorder.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <optional>

#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/sinks/basic_file_sink.h>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/events/event.h"
#include "launcher/registry/registry_db.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::run {

using nlohmann::json;

RunRecorder::RunRecorder(const RunDirectory& run, EventLog events, Console console, const Clock& clock,
                         RunLogWriter::BeforeWrite before_write, uint64_t rank_log_max_bytes)
    : run_(run),
      clock_(clock),
      events_(std::move(events)),
      rank_logs_(run.ranks_dir(), rank_log_max_bytes),
      console_(console),
      console_mode_(console.mode()),
      worker_echo_(console.echo()),
      state_writer_(run.state_path()),
      writer_({}, std::move(before_write), [this](const RunLogWriter::DropSummary& dropped) { report_drops(dropped); }) {}

RunRecorder::~RunRecorder() { writer_.flush(); }

namespace {

using Priority = RunLogWriter::Priority;

/// What `dtrain status`, `resume` and `report` are built from is kept while the queue has room
/// at all: the run's state and end, failures and their root cause, recoveries, plans,
/// generations, checkpoints, drills, worker exits (with their last output) and lost hosts.
Priority priority_of_event(const events::Event& event) {
  std::string_view name = events::event_name(event);
  for (std::string_view prefix : {"run.", "failure.", "recovery.", "checkpoint.", "plan.", "generation.", "drill."}) {
    if (name.substr(0, prefix.size()) == prefix) return Priority::kEssential;
  }
  bool essential = std::holds_alternative<events::WorkerExit>(event) || std::holds_alternative<events::HostLost>(event) ||
                   std::holds_alternative<events::StackConsistency>(event);
  return essential ? Priority::kEssential : Priority::kRecord;
}

/// The console's line for an event, when it has one (the run's state, a failure).
std::optional<std::string> console_text(const events::Event& event) {
  if (const auto* state = std::get_if<events::RunState>(&event)) return state->state + ": " + state->why;
  // Hosts whose software stacks differ: the sentence, then the items side by side.
  if (const auto* stack = std::get_if<events::StackConsistency>(&event); stack && !stack->differences.empty()) {
    std::string text = (stack->action == events::StackConsistency::kRefused ? "error: " : "warning: ") + stack->detail;
    for (const std::string& line : events::stack_difference_table(stack->differences)) text += "\n  " + line;
    return text;
  }
  // A host the health checks kept out, or let in with something to say (spec health).
  if (const auto* health = std::get_if<events::HostHealth>(&event); health && health->verdict != events::HealthCheckResult::kOk) {
    return (health->action == events::HostHealth::kLeftOut ? "error: " : "warning: ") + health->detail;
  }
  if (const auto* quarantined = std::get_if<events::HostQuarantined>(&event)) {
    return "quarantined: " + quarantined->host + " (" + quarantined->reason +
           "); later runs plan without it until `dtrain hosts release " + quarantined->host + "`";
  }
  if (const auto* detected = std::get_if<events::FailureDetected>(&event)) {
    const events::FailureCause& cause = detected->cause;
    return "failure: " + events::to_string(cause.kind) + " on " + cause.host + (cause.rank ? " rank " + std::to_string(*cause.rank) : "") +
           ": " + cause.detail;
  }
  return std::nullopt;
}

std::string describe_drops(const RunLogWriter::DropSummary& dropped) {
  std::string kinds;
  for (const auto& [kind, count] : dropped.kinds) kinds += (kinds.empty() ? "" : ", ") + std::to_string(count) + " " + kind;
  return "the run directory's file system fell behind and the run-log queue reached its bound: " +
         std::to_string(dropped.writes) + " writes (" + std::to_string(dropped.bytes) + " bytes: " + kinds +
         ") made between " + format_timestamp_utc(dropped.first_wall_ms) + " and " +
         format_timestamp_utc(dropped.last_wall_ms) + " were not written";
}

}  // namespace

void RunRecorder::report_drops(const RunLogWriter::DropSummary& dropped) {
  // On the writer thread, in the queue's place of the first drop.
  events::RunlogDropped event{dropped.bytes, dropped.writes, describe_drops(dropped), dropped.kinds,
                              format_timestamp_utc(dropped.first_wall_ms), format_timestamp_utc(dropped.last_wall_ms)};
  if (log_) log_->warn("{}", event.detail);
  if (Status written = events_.append(event.to_json(), clock_.wall_ms()); !written && log_) {
    log_->error("events.jsonl: {}", written.error().message);
  }
}

Status RunRecorder::open(registry::QuarantineRule quarantine_rule) {
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(run_.supervisor_log_path());
    // One background thread for the process's async loggers; a full queue drops the oldest
    // diagnostics rather than blocking the loop.
    if (!spdlog::thread_pool()) spdlog::init_thread_pool(8192, 1);
    log_ = std::make_shared<spdlog::async_logger>("supervisor", sink, spdlog::thread_pool(),
                                                  spdlog::async_overflow_policy::overrun_oldest);
    log_->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %v", spdlog::pattern_time_type::utc);
    // Flushed at warnings, every second by the loop (flush_log) and at the end: a flush per line
    // was a write(2) per line, which at thousands of hosts is most of what logging costs.
    log_->flush_on(spdlog::level::warn);
  } catch (const spdlog::spdlog_ex& error) {
    return Error::infra(run_.supervisor_log_path() + ": " + error.what());
  }
  ::chmod(run_.supervisor_log_path().c_str(), 0600);
  auto tenant_of_spec = [](const std::string& spec_path) {
    spec::LoadResult loaded = spec::load_job_spec(spec_path, {}, spec::EnvValues::names_only);
    return loaded.ok() ? loaded.spec->tenant : std::string();
  };
  registry_ = std::make_unique<RegistrySync>(registry::registry_path(), run_.id(), run_.path(), run_.events_path(),
                                             run_.spec_path(), tenant_of_spec,
                                             [log = log_](const std::string& warning) { log->warn("{}", warning); },
                                             quarantine_rule);
  return {};
}

void RunRecorder::record(json event) {
  int64_t wall = clock_.wall_ms();
  // The driver builds its events from the structs of events.h: they always read back.
  Result<LoggedEvent> typed = to_logged_event(event);
  std::string name = typed ? std::string(events::event_name(typed->event)) : "event";
  Priority priority = typed ? priority_of_event(typed->event) : Priority::kEssential;
  if (!typed) log_->error("internal bug: an event that does not read back: {}", typed.error().message);
  if (typed) {
    if (std::optional<std::string> text = console_text(typed->event)) {
      for (std::string& line : split(*text, '\n')) console_line(std::move(line));  // each line printable()
    }
    if (registry_) registry_->observe(std::move(*typed), wall);
  }
  json copy = event;
  copy.erase("ev");
  copy.erase("tail");
  std::string text = copy.dump(-1, ' ', false, json::error_handler_t::replace);
  log_->info("{} {}", name, text);
  // The line's size stands for the queued object's (a few times larger in memory).
  RunLogWriter::JobInfo info{priority, name, text.size() + name.size() + 64, wall};
  writer_.post([this, event = std::move(event), wall] {
    if (Status written = events_.append(event, wall); !written) log_->error("events.jsonl: {}", written.error().message);
  }, info);
}

void RunRecorder::write_file_then_record(std::string path, std::string text, json event) {
  Result<LoggedEvent> typed = to_logged_event(event);
  std::string name = typed ? std::string(events::event_name(typed->event)) : "event";
  RunLogWriter::JobInfo info{Priority::kRecord, name, text.size(), clock_.wall_ms()};
  writer_.post([this, path = std::move(path), text = std::move(text), event = std::move(event)]() mutable {
    (void)make_directories(path.substr(0, path.rfind('/')), 0700);  // samples/ appears with the first sample
    if (Status written = write_file_atomic(path, text); !written) {
      event["error"] = written.error().message;
    } else {
      event["path"] = path;
      event["bytes"] = text.size();
    }
    if (Status appended = events_.append(event, clock_.wall_ms()); !appended) {
      log_->error("events.jsonl: {}", appended.error().message);
    }
  }, info);
}

void RunRecorder::write_file(std::string path, std::string text, Durability durability, int mode) {
  // Plans are read back by status, resume and report; a .prom file is rewritten every
  // metrics.interval, so a dropped one is superseded soon; host facts and the rest are records.
  RunLogWriter::JobInfo info{Priority::kRecord, "file", text.size(), clock_.wall_ms()};
  if (path.rfind(run_.path() + "/plan-", 0) == 0) {
    info.priority = Priority::kEssential;
    info.kind = "plan";
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".prom") == 0) {
    info.priority = Priority::kOutput;
    info.kind = "metrics.prom";
  }
  writer_.post([this, path = std::move(path), text = std::move(text), durability, mode] {
    if (Status written = write_file_atomic(path, text, mode, durability); !written) {
      log_->error("{}", written.error().message);
    }
  }, info);
}

void RunRecorder::rank_output(int rank, int generation, std::string_view stream, std::string line) {
  int64_t wall = clock_.wall_ms();
  line += '\n';
  RunLogWriter::JobInfo info{Priority::kOutput, "rank_output", line.size(), wall};
  bool to_stderr = stream == "stderr";
  writer_.post([this, rank, generation, to_stderr, line = std::move(line), wall] {
    if (Status written = rank_logs_.append(rank, generation, line, wall); !written) {
      log_->error("rank {} log: {}", rank, written.error().message);
    }
    console_.worker_line(rank, to_stderr ? "stderr" : "stdout", std::string_view(line).substr(0, line.size() - 1));
  }, info);
}

void RunRecorder::metrics(json line) {
  std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  RunLogWriter::JobInfo info{Priority::kOutput, "metrics", text.size(), clock_.wall_ms()};
  writer_.post([this, text = std::move(text)] {
    std::string path = run_.path() + "/metrics.jsonl";
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && static_cast<uint64_t>(info.st_size) >= kMetricsMaxBytes) {
      (void)::rename(path.c_str(), (run_.path() + "/metrics.1.jsonl").c_str());
    }
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (fd.valid()) (void)write_all(fd.get(), text);
  }, info);
}

void RunRecorder::console_line(std::string text) {
  if (console_mode_ == Console::Mode::quiet) return;
  int64_t wall = clock_.wall_ms();
  RunLogWriter::JobInfo info{Priority::kRecord, "console", text.size(), wall};
  writer_.post([this, text = std::move(text), wall] { console_.line(wall, text); }, info);
}

void RunRecorder::console_status(ConsoleStatus status) {
  if (console_mode_ == Console::Mode::quiet) return;
  int64_t now = clock_.monotonic_ms(), wall = clock_.wall_ms();
  // Skipped while the writer is behind: the next status supersedes this one anyway.
  if (writer_.queued() > 0) return;
  writer_.post([this, status = std::move(status), now, wall] { console_.status(now, wall, status); },
               {Priority::kOutput, "console_status", 0, wall});
}

void RunRecorder::flush() {
  writer_.flush();
  if (Status written = state_writer_.flush(); !written) log_->error("state.json: {}", written.error().message);
  if (registry_) registry_->wait_if_finished();
  log_->flush();
}

}  // namespace dtrain::run
