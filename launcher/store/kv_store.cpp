#include "launcher/store/kv_store.h"

#include <algorithm>
#include <utility>

#include "launcher/base/duration.h"
#include "launcher/base/json_fields.h"

namespace dtrain::store {
namespace {

StoreReply error_reply(const Requester& to, int gen, int64_t id, std::string message) {
  return {to, gen, proto::RequestFailed{id, std::move(message)}};
}

std::string quote_key(const std::string& key) {
  // Keys come from workers; cut long ones so an error line stays readable.
  return "'" + (key.size() > 64 ? key.substr(0, 64) + "..." : key) + "'";
}

/// Bytes of `text` as a JSON string in nlohmann's compact dump, quotes included: what the agent
/// writes to the worker. Store values arrived as JSON strings, so they are valid UTF-8, which
/// the dump copies unescaped; only '"', '\\' and control bytes grow.
size_t json_string_bytes(const std::string& text) {
  size_t bytes = 2;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') {
      bytes += 2;
    } else {
      bytes += c < 0x20 ? 6 : 1;
    }
  }
  return bytes;
}

std::string reply_too_long(const std::string& what, size_t bytes, size_t limit, const char* fix) {
  return what + ": reply would be " + std::to_string(bytes) + " bytes, over the " + std::to_string(limit) +
         " limit; " + fix;
}

/// Checks a key; returns an error text or "".
std::string key_problem(const std::string& text) {
  if (text.empty()) return "key must not be empty";
  if (text.size() > kMaxKeyBytes) {
    return "key " + quote_key(text) + " is " + std::to_string(text.size()) + " bytes; the limit is " +
           std::to_string(kMaxKeyBytes);
  }
  return "";
}

}  // namespace

std::vector<StoreReply> KvStore::begin_generation(int gen, int64_t /*now_ms*/) {
  std::vector<StoreReply> replies;
  if (gen <= generation_) return replies;
  for (const PendingWait& wait : waits_.take_all()) {
    replies.push_back(error_reply(wait.from, wait.gen, wait.id,
                                  "kv.wait: generation " + std::to_string(wait.gen) +
                                      " ended (now " + std::to_string(gen) +
                                      "); the worker will be restarted"));
  }
  values_.clear();
  total_bytes_ = 0;
  generation_ = gen;
  return replies;
}

std::vector<StoreReply> KvStore::handle(const Requester& from, int gen, const StoreRequest& request,
                                        int64_t now_ms) {
  if (const auto* check = std::get_if<proto::GenCheckRequest>(&request)) {
    return {{from, gen, proto::GenOk{check->id, gen == generation_ && gen >= 0, generation_}}};
  }
  static constexpr const char* kTypes[] = {contract::wire::kKvSet, contract::wire::kKvGet, contract::wire::kKvWait,
                                           contract::wire::kKvAdd, contract::wire::kGenCheck};
  static_assert(std::size(kTypes) == std::variant_size_v<StoreRequest>);
  const char* type = kTypes[request.index()];
  int64_t id = std::visit([](const auto& typed) { return typed.id; }, request);
  if (gen != generation_) {
    const char* age = gen < generation_ ? "stale" : "unknown";
    return {error_reply(from, gen, id,
                        std::string(type) + ": " + age + " generation " + std::to_string(gen) + " (current " +
                            std::to_string(generation_) + ")")};
  }
  if (const auto* set = std::get_if<proto::KvSetRequest>(&request)) return handle_set(from, gen, *set);
  if (const auto* add = std::get_if<proto::KvAddRequest>(&request)) return handle_add(from, gen, *add);
  if (const auto* wait = std::get_if<proto::KvWaitRequest>(&request)) return handle_wait(from, gen, *wait, now_ms);
  return handle_get(from, gen, std::get<proto::KvGetRequest>(request));
}

std::vector<StoreReply> KvStore::handle_get(const Requester& from, int gen, const proto::KvGetRequest& request) {
  int64_t id = request.id;
  if (std::string problem = key_problem(request.key); !problem.empty()) {
    return {error_reply(from, gen, id, "kv.get: " + problem)};
  }
  auto found = values_.find(request.key);
  if (found == values_.end()) return {{from, gen, proto::StoreValue{id, std::nullopt}}};
  size_t bytes = json_compact(proto::to_json(proto::StoreValue{id, ""})).size() - 2 + json_string_bytes(found->second);
  if (bytes > limits_.max_reply_bytes) {
    return {error_reply(from, gen, id,
                        reply_too_long("kv.get " + quote_key(found->first), bytes, limits_.max_reply_bytes,
                                       "store smaller values (large state belongs in checkpoints or files)"))};
  }
  return {{from, gen, proto::StoreValue{id, found->second}}};
}

std::vector<StoreReply> KvStore::handle_set(const Requester& from, int gen, const proto::KvSetRequest& request) {
  int64_t id = request.id;
  if (std::string problem = key_problem(request.key); !problem.empty()) {
    return {error_reply(from, gen, id, "kv.set: " + problem)};
  }
  const std::string& key_text = request.key;
  const std::string& value_text = request.value;
  if (value_text.size() > kMaxValueBytes) {
    return {error_reply(from, gen, id,
                        "kv.set " + quote_key(key_text) + ": value is " +
                            std::to_string(value_text.size()) + " bytes; the limit is " +
                            std::to_string(kMaxValueBytes))};
  }
  if (values_.size() >= kMaxKeys && !values_.contains(key_text)) {
    return {error_reply(from, gen, id,
                        "kv.set " + quote_key(key_text) + ": the store already holds " +
                            std::to_string(kMaxKeys) + " keys (the limit) in generation " +
                            std::to_string(gen))};
  }
  std::vector<StoreReply> woken;
  if (std::optional<std::string> full = put(key_text, value_text, woken)) {
    return {error_reply(from, gen, id, "kv.set " + quote_key(key_text) + ": " + *full)};
  }
  std::vector<StoreReply> replies{{from, gen, proto::StoreOk{id}}};
  for (StoreReply& done : woken) replies.push_back(std::move(done));
  return replies;
}

// Atomic because the store is single-threaded: read, add, write and reply happen in one call.
std::vector<StoreReply> KvStore::handle_add(const Requester& from, int gen, const proto::KvAddRequest& request) {
  int64_t id = request.id;
  if (std::string problem = key_problem(request.key); !problem.empty()) {
    return {error_reply(from, gen, id, "kv.add: " + problem)};
  }
  const std::string& key_text = request.key;
  int64_t total = 0;
  if (auto found = values_.find(key_text); found != values_.end()) {
    size_t used = 0;
    try {
      total = std::stoll(found->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != found->second.size()) {
      return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": the key holds '" +
                                             found->second.substr(0, 40) + "', not a decimal integer")};
    }
  } else if (values_.size() >= kMaxKeys) {
    return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": the store already holds " +
                                           std::to_string(kMaxKeys) + " keys (the limit)")};
  }
  int64_t step = request.delta;
  if (__builtin_add_overflow(total, step, &total)) {
    return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": the sum overflows 64 bits")};
  }
  std::vector<StoreReply> woken;
  if (std::optional<std::string> full = put(key_text, std::to_string(total), woken)) {
    return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": " + *full)};
  }
  std::vector<StoreReply> replies{{from, gen, proto::StoreValue{id, values_[key_text]}}};
  for (StoreReply& done : woken) replies.push_back(std::move(done));
  return replies;
}

std::optional<std::string> KvStore::put(const std::string& key, std::string value, std::vector<StoreReply>& woken) {
  auto found = values_.find(key);
  size_t old_bytes = found == values_.end() ? 0 : key.size() + found->second.size();
  size_t new_total = total_bytes_ - old_bytes + key.size() + value.size();
  if (new_total > limits_.max_total_bytes) {
    return "the store would hold " + std::to_string(new_total) + " bytes of keys and values in generation " +
           std::to_string(generation_) + ", over its limit of " + std::to_string(limits_.max_total_bytes) +
           "; keep rendezvous data small (large state belongs in checkpoints or files)";
  }
  total_bytes_ = new_total;
  if (found != values_.end()) {
    found->second = std::move(value);  // keys never leave a generation: no wait names this one
    return std::nullopt;
  }
  values_.emplace(key, std::move(value));
  for (const PendingWait& wait : waits_.key_arrived(key)) woken.push_back(values_reply(wait));
  return std::nullopt;
}

std::vector<StoreReply> KvStore::handle_wait(const Requester& from, int gen, const proto::KvWaitRequest& request,
                                             int64_t now_ms) {
  int64_t id = request.id;
  if (request.keys.empty()) return {error_reply(from, gen, id, "kv.wait: needs a non-empty array \"keys\"")};
  if (request.keys.size() > kMaxWaitKeys) {
    return {error_reply(from, gen, id,
                        "kv.wait: " + std::to_string(request.keys.size()) + " keys; the limit is " +
                            std::to_string(kMaxWaitKeys))};
  }
  PendingWait wait{from, gen, id, {}, kDefaultWaitTimeoutMs, 0};
  for (const std::string& key : request.keys) {
    if (std::string problem = key_problem(key); !problem.empty()) {
      return {error_reply(from, gen, id, "kv.wait: " + problem)};
    }
  }
  wait.keys = request.keys;
  if (request.timeout_ms) {
    if (*request.timeout_ms < 0) {
      return {error_reply(from, gen, id,
                          "kv.wait: \"timeout_ms\" must be a non-negative integer, got " +
                              std::to_string(*request.timeout_ms))};
    }
    wait.timeout_ms = std::min(*request.timeout_ms, kMaxWaitTimeoutMs);
  }
  std::vector<std::string> missing = missing_keys(wait.keys);
  if (missing.empty()) return {values_reply(wait)};
  wait.deadline_ms = now_ms + wait.timeout_ms;
  if (wait.timeout_ms == 0) return expire_one(wait);
  if (std::optional<std::string> refused = waits_.refusal(from, wait.keys.size())) {
    return {error_reply(from, gen, id, "kv.wait: " + *refused)};
  }
  waits_.add(std::move(wait), missing);
  return {};
}

std::vector<StoreReply> KvStore::expire(int64_t now_ms) {
  std::vector<StoreReply> replies;
  for (const PendingWait& wait : waits_.take_expired(now_ms)) {
    for (StoreReply& reply : expire_one(wait)) replies.push_back(std::move(reply));
  }
  return replies;
}

std::vector<StoreReply> KvStore::expire_one(const PendingWait& wait) const {
  // Named, up to a few: an error line with 10,000 escaped keys would itself be too long to send.
  std::vector<std::string> missing = missing_keys(wait.keys);
  std::string named;
  for (size_t i = 0; i < missing.size() && i < kMaxKeysNamedInTimeout; ++i) {
    named += (named.empty() ? "" : ", ") + quote_key(missing[i]);
  }
  if (missing.size() > kMaxKeysNamedInTimeout) {
    named += " and " + std::to_string(missing.size() - kMaxKeysNamedInTimeout) + " more";
  }
  return {error_reply(wait.from, wait.gen, wait.id,
                      "kv.wait: timeout after " + format_duration(Millis(wait.timeout_ms)) +
                          " waiting for keys [" + named +
                          "]; a peer did not publish them (did it crash or start late?)")};
}

void KvStore::forget(const Requester& who) { waits_.forget(who); }

std::optional<int64_t> KvStore::next_deadline_ms() const { return waits_.next_deadline_ms(); }

std::vector<std::string> KvStore::missing_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  return missing;
}

StoreReply KvStore::values_reply(const PendingWait& wait) const {
  // Measured before it is built: a reply of 10,000 values of 1 MiB is never copied together.
  proto::StoreValues reply{wait.id, {}};
  size_t bytes = json_compact(proto::to_json(reply)).size() + (wait.keys.size() - 1);  // the commas between values
  for (const std::string& key : wait.keys) bytes += json_string_bytes(values_.at(key));
  if (bytes > limits_.max_reply_bytes) {
    return error_reply(wait.from, wait.gen, wait.id,
                       reply_too_long("kv.wait", bytes, limits_.max_reply_bytes,
                                      "wait for fewer keys or store smaller values"));
  }
  reply.values.reserve(wait.keys.size());
  for (const std::string& key : wait.keys) reply.values.push_back(values_.at(key));
  return {wait.from, wait.gen, std::move(reply)};
}

}  // namespace dtrain::store
