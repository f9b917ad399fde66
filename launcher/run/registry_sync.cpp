#include "launcher/run/registry_sync.h"

#include <chrono>
#include <set>
#include <string_view>

#include "launcher/base/clock.h"
#include "launcher/base/event_catalogue.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/json_access.h"

namespace dtrain::run {

using nlohmann::json;

namespace {

/// The events records_from_events reads; the rest of the log is not kept.
bool registry_reads(std::string_view name) {
  static const std::set<std::string_view> kept = {
      events::kRunSubmitted,      events::kRunState,      events::kRunFinished,     events::kPlanGeneration,
      events::kGenerationSpawned, events::kWorkerStarted, events::kHostLost,        events::kHostExcluded,
      events::kHostConnected,     events::kHostFacts,     events::kFailureDetected, events::kFailureRootCause,
      events::kRecoveryCompleted};
  return kept.count(name) > 0;
}

/// The events after which the registry should not wait for its quiet interval.
bool writes_soon(std::string_view name) {
  static const std::set<std::string_view> soon = {
      events::kGenerationSpawned, events::kFailureDetected, events::kHostLost,  events::kHostExcluded,
      events::kRecoveryCompleted, events::kRunState,        events::kRunFinished};
  return soon.count(name) > 0;
}

int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  // Follows the file the run log writer writes: the registry sees what a rebuild would see.
  EventFollower follower(events_path_);
  std::vector<json> kept;
  bool dirty = false;
  bool finished = false;
  int64_t retry_after_ms = 0;  // after a failed write: not before this (wall ms), unless final
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
    Result<std::vector<json>> fresh = follower.poll();
    if (fresh) {
      for (json& event : *fresh) {
        std::string name = json_string(event, "ev");
        if (!registry_reads(name)) continue;
        finished = finished || name == events::kRunFinished;
        kept.push_back(std::move(event));
        dirty = true;
      }
    }
    bool last_chance = final_requested || stopping;
    if (dirty && (last_chance || wall_now_ms() >= retry_after_ms)) {
      if (write(kept, finished)) {
        dirty = false;
      } else {
        retry_after_ms = wall_now_ms() + 10 * kQuietWriteIntervalMs;
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
  int64_t now = wall_now_ms();
  if (last_warning_ms_ < 0 || now - last_warning_ms_ >= 60000) {
    last_warning_ms_ = now;
    warn_("run registry not updated (the run goes on; its directory is the record, and `dtrain registry "
          "rebuild` re-creates the registry from it): " + written.error().message);
  }
  return false;
}

}  // namespace dtrain::run
