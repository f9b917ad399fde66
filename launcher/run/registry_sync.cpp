#include "launcher/run/registry_sync.h"

#include <pthread.h>

#include <chrono>
#include <set>
#include <string_view>

#include "launcher/base/clock.h"
#include "launcher/events/event_catalogue.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/line_follower.h"

namespace dtrain::run {

using nlohmann::json;

namespace {

/// The events after which the registry should not wait for its quiet interval.
bool writes_soon(std::string_view name) {
  static const std::set<std::string_view> soon = {
      events::kGenerationSpawned, events::kFailureDetected, events::kHostLost,  events::kHostExcluded,
      events::kRecoveryCompleted, events::kRunState,        events::kRunFinished};
  return soon.count(name) > 0;
}

/// The "ev" of an events.jsonl line as the run log writes it ({"ts":"...","ev":"name",...}),
/// without parsing the line: at a generation's start 16,384 worker lines arrive at once, and
/// only those the registry reads are worth a JSON parse. Empty when not found.
std::string_view event_name_of(std::string_view line) {
  constexpr std::string_view key = "\"ev\":\"";
  size_t at = line.find(key);
  if (at == std::string_view::npos) return {};
  size_t start = at + key.size();
  size_t end = line.find('"', start);
  return end == std::string_view::npos ? std::string_view() : line.substr(start, end - start);
}

/// end_reason of an allocation the run still held when the registry was last written.
constexpr const char* kStillHeld = "still held at the supervisor's last registry write";

}  // namespace

RegistrySync::RegistrySync(std::string registry_file, std::string run_id, std::string run_dir,
                           std::string events_path, std::string spec_path, registry::TenantOfSpec tenant_of_spec,
                           Warn warn)
    : registry_file_(std::move(registry_file)),
      run_id_(std::move(run_id)),
      run_dir_(std::move(run_dir)),
      events_path_(std::move(events_path)),
      spec_path_(std::move(spec_path)),
      tenant_of_spec_(std::move(tenant_of_spec)),
      warn_(std::move(warn)),
      thread_([this] { loop(); }) {}

RegistrySync::~RegistrySync() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void RegistrySync::observe(const std::string& event_name) {
  if (!writes_soon(event_name)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    urgent_ = true;
    if (event_name == events::kRunFinished) finished_seen_ = true;
  }
  wake_.notify_one();
}

void RegistrySync::wait_if_finished() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!finished_seen_ || final_written_) return;
  final_requested_ = true;
  wake_.notify_one();
  written_.wait(lock, [this] { return final_written_ || stopping_; });
}

void RegistrySync::loop() {
  ::pthread_setname_np(::pthread_self(), "dtrain-registry");  // top -H, perf and gdb name it
  // Follows the file the run log writer writes: the registry sees what a rebuild would see.
  LineFollower follower(events_path_);
  bool header_seen = false;
  std::vector<json> kept;
  bool dirty = false;
  bool finished = false;
  int64_t retry_after_ms = 0;  // after a failed write: not before this (wall ms), unless final
  int64_t last_written_ms = 0;
  while (true) {
    bool urgent = false, final_requested = false, stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(kQuietWriteIntervalMs),
                     [this] { return urgent_ || final_requested_ || stopping_; });
      urgent = std::exchange(urgent_, false);
      final_requested = final_requested_;
      stopping = stopping_;
    }
    // An urgent event was handed to the writer thread a moment ago: give it time to reach the file.
    if (urgent && !final_requested && !stopping) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (Result<std::vector<std::string>> lines = follower.poll(); lines && !lines->empty(); lines = follower.poll()) {
      for (const std::string& line : *lines) {
        if (!header_seen) {  // line 1: the log's header, not an event
          header_seen = true;
          continue;
        }
        if (!registry::records_read_event(event_name_of(line))) continue;
        Result<EventRecord> record = parse_event_line(line);
        if (!record) continue;  // a damaged line: a rebuild skips it too
        finished = finished || record->name == events::kRunFinished;
        kept.push_back(registry::fields_records_read(std::move(record->event)));
        dirty = true;
      }
    }
    bool last_chance = final_requested || stopping;
    // Allocations still held end at the write's time: rewrite them while the run runs.
    if (!finished && !kept.empty() && SystemClock().wall_ms() - last_written_ms >= kHeldRewriteIntervalMs) dirty = true;
    if (dirty && (last_chance || SystemClock().wall_ms() >= retry_after_ms)) {
      if (write(kept, finished)) {
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

bool RegistrySync::write(const std::vector<json>& events, bool finished) {
  registry::RunRecords records =
      registry::records_from_events(run_id_, run_dir_, events, json::object(), /*still_running=*/!finished);
  registry::complete_run_identity(records, spec_path_, tenant_of_spec_);
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
