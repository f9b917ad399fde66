#pragma once
// PendingWaits: the kv.wait requests the store cannot answer yet, indexed three ways so that no
// operation scans all of them: by missing key (a kv.set of a new key wakes exactly the waits
// that name it), by deadline (expiry and the event loop's poll timeout) and by requester (the
// per-worker cap and forget()). Capped per requester, in number and in keys named, so that
// workers asking for keys nobody will publish cannot grow the supervisor's memory without end.

#include <cstddef>
#include <cstdint>
#include <compare>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>


namespace dtrain::store {

/// Who asked: the worker a reply must be routed back to.
struct Requester {
  std::string host;
  int rank = -1;
  bool operator==(const Requester&) const = default;
  auto operator<=>(const Requester&) const = default;
};

/// One kv.wait not yet answered.
struct PendingWait {
  Requester from;
  int gen = -1;
  int64_t id = 0;
  std::vector<std::string> keys;  ///< as asked: order and duplicates kept for the reply
  int64_t timeout_ms = 0;
  int64_t deadline_ms = 0;
};

/// Waits one worker may have pending at once. A worker blocks in each kv.wait, so even a
/// many-threaded one holds a handful; more is a loop that forgot to wait for its replies.
inline constexpr size_t kMaxWaitsPerRequester = 64;
/// Waits of all workers together: one per rank of a 100,000-rank job, with room to spare.
inline constexpr size_t kMaxPendingWaits = 100'000;
/// Keys named by all pending waits together (each wait may name 10,000): bounds their memory
/// to about 512 MB even with keys of the maximum length.
inline constexpr size_t kMaxPendingWaitKeys = 1'000'000;

struct PendingWaitLimits {
  size_t per_requester = kMaxWaitsPerRequester;
  size_t total = kMaxPendingWaits;
  size_t total_keys = kMaxPendingWaitKeys;
};

class PendingWaits {
 public:
  explicit PendingWaits(PendingWaitLimits limits = {}) : limits_(limits) {}

  /// Why a wait of `from` naming `key_count` keys may not be added (the cap it would pass, as
  /// the text of the error reply after "kv.wait: "), or nullopt when it may.
  std::optional<std::string> refusal(const Requester& from, size_t key_count) const;

  /// Adds `wait` (admitted by refusal()); `missing`: its keys not in the store, non-empty.
  void add(PendingWait wait, const std::vector<std::string>& missing);

  /// `key` was just stored for the first time in this generation: removes and returns the
  /// waits it completed (all their keys present now), in arrival order. Only the waits that
  /// name `key` are looked at.
  std::vector<PendingWait> key_arrived(const std::string& key);

  /// Removes and returns the waits whose deadline is at or before `now_ms`, in arrival order.
  std::vector<PendingWait> take_expired(int64_t now_ms);

  /// Removes and returns every wait, in arrival order (a generation ended).
  std::vector<PendingWait> take_all();

  /// Drops the waits of `who` (a worker that went away).
  void forget(const Requester& who);

  /// The earliest deadline of a pending wait.
  std::optional<int64_t> next_deadline_ms() const;

  size_t size() const { return waits_.size(); }
  /// Keys named by the pending waits (what kMaxPendingWaitKeys caps).
  size_t key_count() const { return key_count_; }

 private:
  struct Entry {
    PendingWait wait;
    std::vector<std::string> missing;  ///< distinct keys still absent: its entries in by_key_
    size_t missing_left = 0;
  };

  /// Removes the wait numbered `serial` from every index and returns it.
  PendingWait remove(uint64_t serial);
  std::vector<PendingWait> remove_all(const std::vector<uint64_t>& serials);

  PendingWaitLimits limits_;
  uint64_t next_serial_ = 0;
  std::map<uint64_t, Entry> waits_;  // by serial: arrival order
  std::unordered_map<std::string, std::set<uint64_t>> by_key_;  // missing key → waits naming it
  std::set<std::pair<int64_t, uint64_t>> by_deadline_;
  std::map<Requester, std::set<uint64_t>> by_requester_;
  size_t key_count_ = 0;
};

}  // namespace dtrain::store
