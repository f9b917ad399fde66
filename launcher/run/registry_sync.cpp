#include "launcher/run/registry_sync.h"

#include <pthread.h>

#include <chrono>
#include <set>
#include <string_view>

#include "launcher/base/clock.h"
#include "launcher/base/event_catalogue.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/line_follower.h"
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

/// Only what records_from_events reads of an event: at 16,384 ranks the whole events (a
/// host.facts lists every GPU) held 50 MB more in the supervisor than these.
json slim(json event) {
  static const char* const kept_fields[] = {"ts",   "ev",     "gen",   "host",       "hosts",
                                            "world_size", "reason", "detail", "rank", "kind",
                                            "state", "exit_code", "name", "tenant", "user"};
  json out = json::object();
  for (const char* field : kept_fields) {
    auto found = event.find(field);
    if (found != event.end()) out[field] = std::move(*found);
  }
  // host.facts: only whether the host has GPUs (it holds GPUs, not worker slots).
  auto gpus = event.find("gpus");
  if (gpus != event.end() && gpus->is_array() && !gpus->empty()) out["gpus"] = json::array({true});
  // run.finished: the root cause's text, for the run's exit reason.
  auto root = event.find("root_cause");
  if (root != event.end() && root->is_object()) {
    json cause = json::object();
    for (const char* field : {"detail", "message"}) {
      if (root->contains(field)) cause[field] = (*root)[field];
    }
    out["root_cause"] = std::move(cause);
  }
  return out;
}

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
        if (!registry_reads(event_name_of(line))) continue;
        Result<EventRecord> record = parse_event_line(line);
        if (!record) continue;  // a damaged line: a rebuild skips it too
        finished = finished || record->name == events::kRunFinished;
        kept.push_back(slim(std::move(record->event)));
        dirty = true;
      }
    }
    bool last_chance = final_requested || stopping;
    // Allocations still held end at the write's time: rewrite them while the run runs.
    if (!finished && !kept.empty() && wall_now_ms() - last_written_ms >= kHeldRewriteIntervalMs) dirty = true;
    if (dirty && (last_chance || wall_now_ms() >= retry_after_ms)) {
      if (write(kept, finished)) {
        dirty = false;
        last_written_ms = wall_now_ms();
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
  // Held until now, as far as anyone can tell: ended here, and moved on by the next write.
  int64_t now = wall_now_ms();
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
