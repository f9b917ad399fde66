#include "launcher/run/registry_sync.h"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "launcher/base/clock.h"
#include "launcher/events/event.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/line_follower.h"

namespace dtrain::run {


namespace {

/// The events after which the registry should not wait for its quiet interval.
bool writes_soon(const events::Event& event) {
  using namespace events;
  return std::holds_alternative<GenerationSpawned>(event) || std::holds_alternative<FailureDetected>(event) ||
         std::holds_alternative<HostLost>(event) || std::holds_alternative<HostExcluded>(event) ||
         std::holds_alternative<HostQuarantined>(event) ||
         std::holds_alternative<RecoveryCompleted>(event) || std::holds_alternative<events::RunState>(event) ||
         std::holds_alternative<RunFinished>(event);
}

int64_t file_size(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : 0;
}

/// end_reason of an allocation the run still held when the registry was last written.
constexpr const char* kStillHeld = "still held at the supervisor's last registry write";

}  // namespace

RegistrySync::RegistrySync(std::string registry_file, std::string run_id, std::string run_dir,
                           std::string events_path, std::string spec_path, registry::TenantOfSpec tenant_of_spec,
                           Warn warn, registry::QuarantineRule quarantine_rule)
    : registry_file_(std::move(registry_file)),
      run_id_(std::move(run_id)),
      run_dir_(std::move(run_dir)),
      events_path_(std::move(events_path)),
      spec_path_(std::move(spec_path)),
      history_bytes_(file_size(events_path_)),
      tenant_of_spec_(std::move(tenant_of_spec)),
      warn_(std::move(warn)),
      quarantine_rule_(quarantine_rule),
      thread_([this] { loop(); }) {}

RegistrySync::~RegistrySync() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void RegistrySync::observe(LoggedEvent event, int64_t wall_ms) {
  if (!registry::records_read_event(event.event)) return;
  event.ts = format_timestamp_utc(wall_ms);  // as the log line will have it: a rebuild reads that
  bool soon = writes_soon(event.event);
  bool finished = std::holds_alternative<events::RunFinished>(event.event);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    observed_.push_back(registry::fields_records_read(std::move(event)));
    urgent_ = urgent_ || soon;
    finished_seen_ = finished_seen_ || finished;
  }
  if (soon) wake_.notify_one();
}

void RegistrySync::wait_if_finished() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!finished_seen_ || final_written_) return;
  final_requested_ = true;
  wake_.notify_one();
  written_.wait(lock, [this] { return final_written_ || stopping_; });
}

std::vector<LoggedEvent> RegistrySync::read_history() const {
  std::vector<LoggedEvent> kept;
  if (history_bytes_ == 0) return kept;
  LineFollower follower(events_path_);
  int64_t offset = 0;
  bool header_seen = false;
  for (Result<std::vector<std::string>> lines = follower.poll(); lines && !lines->empty(); lines = follower.poll()) {
    for (const std::string& line : *lines) {
      offset += static_cast<int64_t>(line.size()) + 1;
      if (offset > history_bytes_) return kept;  // recorded since: observe() has it
      if (!header_seen) {  // line 1: the log's header, not an event
        header_seen = true;
        continue;
      }
      Result<LoggedEvent> event = parse_logged_event(line);
      if (!event || !registry::records_read_event(event->event)) continue;  // a damaged line: a rebuild skips it too
      kept.push_back(registry::fields_records_read(std::move(*event)));
    }
  }
  return kept;
}

void RegistrySync::loop() {
  ::pthread_setname_np(::pthread_self(), "dtrain-registry");  // top -H, perf and gdb name it
  std::vector<LoggedEvent> kept = read_history();
  bool dirty = !kept.empty();
  bool finished = std::any_of(kept.begin(), kept.end(), [](const LoggedEvent& event) {
    return std::holds_alternative<events::RunFinished>(event.event);
  });
  int64_t retry_after_ms = 0;  // after a failed write: not before this (wall ms), unless final
  int64_t last_written_ms = 0;
  int64_t last_write_cost_ms = 0;
  while (true) {
    bool final_requested = false, stopping = false;
    std::vector<LoggedEvent> observed;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(kQuietWriteIntervalMs),
                     [this] { return urgent_ || final_requested_ || stopping_; });
      urgent_ = false;
      final_requested = final_requested_;
      stopping = stopping_;
      observed.swap(observed_);
    }
    for (LoggedEvent& event : observed) {
      finished = finished || std::holds_alternative<events::RunFinished>(event.event);
      kept.push_back(std::move(event));
      dirty = true;
    }
    bool last_chance = final_requested || stopping;
    // Allocations still held end at the write's time: rewrite them while the run runs.
    if (!finished && !kept.empty() && SystemClock().wall_ms() - last_written_ms >= kHeldRewriteIntervalMs) dirty = true;
    int64_t now = SystemClock().wall_ms();
    bool paced_out = now < retry_after_ms || now < last_written_ms + kWriteCostMultiple * last_write_cost_ms;
    if (dirty && (last_chance || !paced_out)) {
      bool written = write(kept, finished);
      last_write_cost_ms = std::max<int64_t>(0, SystemClock().wall_ms() - now);
      if (written) {
        dirty = false;
        last_written_ms = SystemClock().wall_ms();
      } else {
        retry_after_ms = SystemClock().wall_ms() + 10 * kQuietWriteIntervalMs;
      }
    }
    if (final_requested) {
      std::lock_guard<std::mutex> lock(mutex_);
      final_written_ = true;
      written_.notify_all();
    }
    if (stopping) break;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  final_written_ = true;
  written_.notify_all();
}

bool RegistrySync::write(const std::vector<LoggedEvent>& events, bool finished) {
  registry::RunRecords records =
      registry::records_from_events(run_id_, run_dir_, events, RunSnapshot{}, /*still_running=*/!finished);
  registry::complete_run_identity(records, spec_path_, tenant_of_spec_);
  records.quarantine_rule = quarantine_rule_;
  // Held until now, as far as anyone can tell: ended here, and moved on by the next write.
  int64_t now = SystemClock().wall_ms();
  for (registry::AllocationRow& allocation : records.allocations) {
    if (allocation.end_ms) continue;
    allocation.end_ms = std::max(now, allocation.start_ms);
    allocation.end_reason = kStillHeld;
  }
  Status written = Status::success();
  if (!db_) {
    Result<registry::RegistryDb> opened = registry::RegistryDb::open(registry_file_, true);
    if (opened) {
      db_.emplace(std::move(opened).value());
    } else {
      written = opened.error();
    }
  }
  if (written) written = registry::replace_run_records(*db_, records);
  if (written) return true;
  db_.reset();  // a damaged or replaced file is opened afresh next time
  if (last_warning_ms_ < 0 || now - last_warning_ms_ >= 60000) {
    last_warning_ms_ = now;
    warn_("run registry not updated (the run goes on; its directory is the record, and `dtrain registry "
          "rebuild` re-creates the registry from it): " + written.error().message);
  }
  return false;
}

}  // namespace dtrain::run
