// The KV store inside one process: standalone runs (world of one) and tests that run several
// ranks as threads. Same semantics as the supervisor's store, including stale-generation refusal.
#include <condition_variable>
#include <map>
#include <mutex>

#include "worker/runtime/worker.h"

namespace dtrain::worker {

struct InProcessKv::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::string> values;
  bool generation_ended = false;
};

InProcessKv::InProcessKv() : state_(std::make_unique<State>()) {}
InProcessKv::~InProcessKv() = default;

Status InProcessKv::set(const std::string& key, const std::string& value) {
  std::lock_guard lock(state_->mutex);
  if (state_->generation_ended) return Error{"kv.set '" + key + "': stale generation (a newer one started)"};
  state_->values[key] = value;
  state_->changed.notify_all();
  return {};
}

Result<std::optional<std::string>> InProcessKv::get(const std::string& key) {
  std::lock_guard lock(state_->mutex);
  if (state_->generation_ended) return Error{"kv.get '" + key + "': stale generation (a newer one started)"};
  auto found = state_->values.find(key);
  if (found == state_->values.end()) return std::optional<std::string>();
  return std::optional<std::string>(found->second);
}

Result<std::vector<std::string>> InProcessKv::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock lock(state_->mutex);
  auto all_present = [&] {
    for (const std::string& key : keys) {
      if (!state_->values.contains(key)) return false;
    }
    return true;
  };
  bool ready = state_->changed.wait_for(lock, timeout, [&] { return all_present() || state_->generation_ended; });
  if (state_->generation_ended) return Error{"kv.wait: stale generation (a newer one started)"};
  if (!ready) {
    std::string missing;
    for (const std::string& key : keys) {
      if (!state_->values.contains(key)) missing += (missing.empty() ? "'" : ", '") + key + "'";
    }
    return Error{"kv.wait: timeout after " + std::to_string(timeout.count()) + "ms waiting for keys [" +
                 missing + "]"};
  }
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(state_->values.at(key));
  return values;
}

Result<bool> InProcessKv::generation_is_current() {
  std::lock_guard lock(state_->mutex);
  return !state_->generation_ended;
}

void InProcessKv::end_generation() {
  std::lock_guard lock(state_->mutex);
  state_->generation_ended = true;
  state_->changed.notify_all();
}

}  // namespace dtrain::worker
