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
//
// Bounded: a reply is never longer than a worker accepts (kMaxReplyBytes: the smallest limit on
// its path, supervisor → agent frame → worker line); a larger one is not sent, the requester
// gets an error naming both sizes instead. Pending waits are capped (pending_waits.h).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <variant>

#include "launcher/proto/worker_messages.h"
#include "launcher/store/pending_waits.h"
#include "worker/contract/wire.h"

namespace dtrain::store {

/// One line for one worker: `msg` is the agent→worker message (kv.ok, kv.value, kv.values,
/// gen.ok or error), carrying the request's id. `gen` is the generation the request came from.
struct StoreReply {
  Requester to;
  int gen = -1;
  proto::ToWorkerMessage msg;
};

/// A worker's store request, as proto::parse_worker_message checked it (types, sizes, a
/// non-empty key list): the store adds what only it can judge (generation, room, timeouts).
using StoreRequest = std::variant<proto::KvSetRequest, proto::KvGetRequest, proto::KvWaitRequest,
                                  proto::KvAddRequest, proto::GenCheckRequest>;

/// Limits that keep one misbehaving worker from exhausting the supervisor's memory.
inline constexpr size_t kMaxKeyBytes = 512;
/// A kv.set arrives as one worker line of at most wire::kMaxLineBytes, so a value is in
/// practice a little shorter than this; a kv.get of any value a worker could set fits a reply.
inline constexpr size_t kMaxValueBytes = 1 << 20;
inline constexpr size_t kMaxKeys = 100'000;
inline constexpr size_t kMaxWaitKeys = 10'000;
/// Keys and values of one generation together: without it, kMaxKeys × kMaxValueBytes is 100 GB.
inline constexpr size_t kMaxTotalBytes = 256 << 20;
/// A kv.wait without "timeout_ms" waits this long.
inline constexpr int64_t kDefaultWaitTimeoutMs = 30'000;
/// Longer timeouts are clamped to this (a day): a wait must end some day.
inline constexpr int64_t kMaxWaitTimeoutMs = 86'400'000;
/// The longest reply (one JSON line, without its newline) the store sends: the line limit of
/// the workers' clients (worker/runtime/agent_connection.cpp closes the connection past it),
/// the smallest on the reply's path (the agent frame that carries it allows 8 MiB).
inline constexpr size_t kMaxReplyBytes = contract::wire::kMaxLineBytes;
/// A wait that times out names at most this many of its missing keys (and how many more).
inline constexpr size_t kMaxKeysNamedInTimeout = 20;

/// The store's caps; tests shrink them.
struct KvLimits {
  size_t max_total_bytes = kMaxTotalBytes;  ///< keys + values of a generation
  size_t max_reply_bytes = kMaxReplyBytes;
  PendingWaitLimits waits = {};
};

class KvStore {
 public:
  explicit KvStore(KvLimits limits = {}) : limits_(limits), waits_(limits.waits) {}

  /// Makes `gen` current. Keys of older generations are dropped; waits still pending from them
  /// are failed, and those error replies are RETURNED HERE (not by expire()). A `gen` that is
  /// not newer than the current one changes nothing and returns no replies.
  std::vector<StoreReply> begin_generation(int gen, int64_t now_ms);

  /// Handles one worker request (kv.set, kv.get, kv.wait, kv.add, gen.check). kv.add adds an
  /// integer "delta" to the key's decimal value (absent: 0), atomically, and answers kv.value
  /// with the new value as decimal text. Returns the replies to
  /// send now: usually one for `from`, but a kv.set may also complete waits of OTHER workers,
  /// and a kv.wait that cannot be answered yet returns nothing (its reply comes from a later
  /// handle() or from expire()). A request the store refuses gets an error reply, never an
  /// exception.
  /// gen.check from any generation is answered with gen.ok {"current": true|false}.
  /// A kv.get or kv.wait whose reply would be over max_reply_bytes is answered with an error
  /// naming both sizes; a kv.wait past a cap on pending waits is answered with an error at once.
  std::vector<StoreReply> handle(const Requester& from, int gen, const StoreRequest& request, int64_t now_ms);

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
  std::vector<StoreReply> handle_set(const Requester& from, int gen, const proto::KvSetRequest& request);
  std::vector<StoreReply> handle_get(const Requester& from, int gen, const proto::KvGetRequest& request);
  std::vector<StoreReply> handle_add(const Requester& from, int gen, const proto::KvAddRequest& request);
  std::vector<StoreReply> handle_wait(const Requester& from, int gen, const proto::KvWaitRequest& request,
                                      int64_t now_ms);
  std::vector<std::string> missing_keys(const std::vector<std::string>& keys) const;
  /// The kv.values reply to `wait` (all its keys present), or the error when it is too long.
  StoreReply values_reply(const PendingWait& wait) const;
  std::vector<StoreReply> expire_one(const PendingWait& wait) const;

  /// Stores `value` under `key` if the total stays within the cap; else the error text. A key
  /// stored for the first time completes the waits that named it: their replies go to `woken`.
  std::optional<std::string> put(const std::string& key, std::string value, std::vector<StoreReply>& woken);

  KvLimits limits_;
  size_t total_bytes_ = 0;
  int generation_ = -1;
  std::map<std::string, std::string> values_;
  PendingWaits waits_;
};

}  // namespace dtrain::store
