#include "launcher/store/pending_waits.h"

#include <algorithm>

namespace dtrain::store {

std::optional<std::string> PendingWaits::refusal(const Requester& from, size_t key_count) const {
  auto own = by_requester_.find(from);
  size_t own_count = own == by_requester_.end() ? 0 : own->second.size();
  if (own_count >= limits_.per_requester) {
    return "rank " + std::to_string(from.rank) + " on " + from.host + " already has " + std::to_string(own_count) +
           " waits pending (the limit per worker is " + std::to_string(limits_.per_requester) +
           "); wait for several keys in one kv.wait, or for its reply before asking again";
  }
  if (waits_.size() >= limits_.total) {
    return std::to_string(waits_.size()) + " waits are pending in the store (the limit for all workers is " +
           std::to_string(limits_.total) + "); the peers that should publish these keys may have failed";
  }
  if (key_count_ + key_count > limits_.total_keys) {
    return "the pending waits name " + std::to_string(key_count_) + " keys and this one " +
           std::to_string(key_count) + " more, over the limit of " + std::to_string(limits_.total_keys) +
           " for all workers; wait for fewer keys at a time";
  }
  return std::nullopt;
}

void PendingWaits::add(PendingWait wait, const std::vector<std::string>& missing) {
  uint64_t serial = next_serial_++;
  Entry entry{std::move(wait), missing, 0};
  std::sort(entry.missing.begin(), entry.missing.end());
  entry.missing.erase(std::unique(entry.missing.begin(), entry.missing.end()), entry.missing.end());
  entry.missing_left = entry.missing.size();
  for (const std::string& key : entry.missing) by_key_[key].insert(serial);
  by_deadline_.insert({entry.wait.deadline_ms, serial});
  by_requester_[entry.wait.from].insert(serial);
  key_count_ += entry.wait.keys.size();
  waits_.emplace(serial, std::move(entry));
}

std::vector<PendingWait> PendingWaits::key_arrived(const std::string& key) {
  auto naming = by_key_.find(key);
  if (naming == by_key_.end()) return {};
  std::set<uint64_t> serials = std::move(naming->second);
  by_key_.erase(naming);
  std::vector<uint64_t> complete;
  for (uint64_t serial : serials) {
    if (--waits_.at(serial).missing_left == 0) complete.push_back(serial);
  }
  return remove_all(complete);  // serials come sorted from the set: arrival order
}

std::vector<PendingWait> PendingWaits::take_expired(int64_t now_ms) {
  std::vector<uint64_t> expired;
  for (auto it = by_deadline_.begin(); it != by_deadline_.end() && it->first <= now_ms; ++it) {
    expired.push_back(it->second);
  }
  std::sort(expired.begin(), expired.end());
  return remove_all(expired);
}

std::vector<PendingWait> PendingWaits::take_all() {
  std::vector<PendingWait> all;
  all.reserve(waits_.size());
  for (auto& [serial, entry] : waits_) all.push_back(std::move(entry.wait));
  waits_.clear();
  by_key_.clear();
  by_deadline_.clear();
  by_requester_.clear();
  key_count_ = 0;
  return all;
}

void PendingWaits::forget(const Requester& who) {
  auto own = by_requester_.find(who);
  if (own == by_requester_.end()) return;
  std::vector<uint64_t> serials(own->second.begin(), own->second.end());
  (void)remove_all(serials);
}

std::optional<int64_t> PendingWaits::next_deadline_ms() const {
  if (by_deadline_.empty()) return std::nullopt;
  return by_deadline_.begin()->first;
}

std::vector<PendingWait> PendingWaits::remove_all(const std::vector<uint64_t>& serials) {
  std::vector<PendingWait> removed;
  removed.reserve(serials.size());
  for (uint64_t serial : serials) removed.push_back(remove(serial));
  return removed;
}

PendingWait PendingWaits::remove(uint64_t serial) {
  auto found = waits_.find(serial);
  Entry entry = std::move(found->second);
  waits_.erase(found);
  for (const std::string& key : entry.missing) {
    auto naming = by_key_.find(key);
    if (naming == by_key_.end()) continue;  // that key arrived: its entry went with it
    naming->second.erase(serial);
    if (naming->second.empty()) by_key_.erase(naming);
  }
  by_deadline_.erase({entry.wait.deadline_ms, serial});
  auto own = by_requester_.find(entry.wait.from);
  own->second.erase(serial);
  if (own->second.empty()) by_requester_.erase(own);
  key_count_ -= entry.wait.keys.size();
  return std::move(entry.wait);
}

}  // namespace dtrain::store
