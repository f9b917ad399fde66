#pragma once
// KvStore: the key-value store the supervisor serves to the workers of one generation, reached
// through the agents (worker/contract/wire.h). Workers use it for Gloo/NCCL rendezvous and for
// the checkpoint handshake. Pure: no I/O and no clock of its own (callers pass now_ms), so the
// event loop owns time and tests drive it with plain numbers.
//
// Generations: keys belong to the generation that wrote them. begin_generation(g) makes every
// older key invisible (they are dropped) and fails the waits still pending from older
// generations, so a restarted job can never read a rendezvous address of the previous one.
// A request stamped with any generation other than the current one is answered with an error,
// and a kv.set from a stale generation is refused (nothing is stored).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::store {

/// Who asked: the worker a reply must be routed back to.
struct Requester {
  std::string host;
  int rank = -1;
  bool operator==(const Requester&) const = default;
};

/// One line for one worker: `msg` is the agent→worker object (kv.ok, kv.value, kv.values,
/// gen.ok or error), carrying the request's id. `gen` is the generation the request came from.
struct StoreReply {
  Requester to;
  int gen = -1;
  nlohmann::json msg;
};

/// Limits that keep one misbehaving worker from exhausting the supervisor's memory.
inline constexpr size_t kMaxKeyBytes = 512;
inline constexpr size_t kMaxValueBytes = 1 << 20;
inline constexpr size_t kMaxKeys = 100'000;
inline constexpr size_t kMaxWaitKeys = 10'000;
/// Keys and values of one generation together: without it, kMaxKeys × kMaxValueBytes is 100 GB.
inline constexpr size_t kMaxTotalBytes = 256 << 20;
/// A kv.wait without "timeout_ms" waits this long.
inline constexpr int64_t kDefaultWaitTimeoutMs = 30'000;
/// Longer timeouts are clamped to this (a day): a wait must end some day.
inline constexpr int64_t kMaxWaitTimeoutMs = 86'400'000;

class KvStore {
 public:
  /// `max_total_bytes`: the cap on keys + values of a generation (tests use a small one).
  explicit KvStore(size_t max_total_bytes = kMaxTotalBytes) : max_total_bytes_(max_total_bytes) {}

  /// Makes `gen` current. Keys of older generations are dropped; waits still pending from them
  /// are failed, and those error replies are RETURNED HERE (not by expire()). A `gen` that is
  /// not newer than the current one changes nothing and returns no replies.
  std::vector<StoreReply> begin_generation(int gen, int64_t now_ms);

  /// Handles one worker request (kv.set, kv.get, kv.wait, kv.add, gen.check). kv.add adds an
  /// integer "delta" to the key's decimal value (absent: 0), atomically, and answers kv.value
  /// with the new value as decimal text. Returns the replies to
  /// send now: usually one for `from`, but a kv.set may also complete waits of OTHER workers,
  /// and a kv.wait that cannot be answered yet returns nothing (its reply comes from a later
  /// handle() or from expire()). Malformed requests get an error reply, never an exception.
  /// gen.check from any generation is answered with gen.ok {"current": true|false}.
  std::vector<StoreReply> handle(const Requester& from, int gen, const nlohmann::json& request,
                                 int64_t now_ms);

  /// Fails waits whose deadline is at or before `now_ms`; the error names the missing keys.
  std::vector<StoreReply> expire(int64_t now_ms);

  /// Drops the pending waits of a worker that went away (its replies would go nowhere).
  void forget(const Requester& who);

  /// The earliest pending wait deadline, for the event loop's poll timeout.
  std::optional<int64_t> next_deadline_ms() const;

  /// -1 until the first begin_generation().
  int current_generation() const { return generation_; }
  /// Number of keys of the current generation.
  size_t size() const { return values_.size(); }
  /// Bytes of its keys and values.
  size_t total_bytes() const { return total_bytes_; }
  /// Number of waits not yet answered.
  size_t pending_waits() const { return waits_.size(); }

 private:
  struct Wait {
    Requester from;
    int gen = -1;
    nlohmann::json id;
    std::vector<std::string> keys;
    int64_t timeout_ms = 0;
    int64_t deadline_ms = 0;
  };

  std::vector<StoreReply> handle_set(const Requester& from, int gen, const nlohmann::json& id,
                                     const nlohmann::json& request);
  std::vector<StoreReply> handle_add(const Requester& from, int gen, const nlohmann::json& id,
                                     const nlohmann::json& request);
  std::vector<StoreReply> handle_wait(const Requester& from, int gen, const nlohmann::json& id,
                                      const nlohmann::json& request, int64_t now_ms);
  bool all_present(const std::vector<std::string>& keys) const;
  nlohmann::json values_of(const std::vector<std::string>& keys) const;
  std::vector<StoreReply> complete_ready_waits();
  std::vector<StoreReply> expire_one(const Wait& wait) const;

  /// Stores `value` under `key` if the total stays within the cap; else the error text.
  std::optional<std::string> put(const std::string& key, std::string value);

  size_t max_total_bytes_;
  size_t total_bytes_ = 0;
  int generation_ = -1;
  std::map<std::string, std::string> values_;
  std::vector<Wait> waits_;  // in arrival order, so replies are deterministic
};

}  // namespace dtrain::store
