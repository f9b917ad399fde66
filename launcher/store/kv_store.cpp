#include "launcher/store/kv_store.h"

#include <algorithm>
#include <utility>

namespace dtrain::store {
namespace {

using nlohmann::json;

StoreReply error_reply(const Requester& to, int gen, const json& id, std::string message) {
  return {to, gen, json{{"type", "error"}, {"id", id}, {"error", std::move(message)}}};
}

std::string quote_key(const std::string& key) {
  // Keys come from workers; cut long ones so an error line stays readable.
  return "'" + (key.size() > 64 ? key.substr(0, 64) + "..." : key) + "'";
}

std::string seconds_text(int64_t ms) {
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

/// Checks a key; returns an error text or "".
std::string key_problem(const json& key) {
  if (!key.is_string()) return "key must be a string";
  const std::string& text = key.get_ref<const std::string&>();
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
  for (const Wait& wait : waits_) {
    replies.push_back(error_reply(wait.from, wait.gen, wait.id,
                                  "kv.wait: generation " + std::to_string(wait.gen) +
                                      " ended (now " + std::to_string(gen) +
                                      "); the worker will be restarted"));
  }
  waits_.clear();
  values_.clear();
  total_bytes_ = 0;
  generation_ = gen;
  return replies;
}

std::vector<StoreReply> KvStore::handle(const Requester& from, int gen, const json& request,
                                        int64_t now_ms) {
  if (!request.is_object()) {
    return {error_reply(from, gen, nullptr, "store: request must be a JSON object")};
  }
  json id = request.contains("id") ? request["id"] : json(nullptr);
  auto type_it = request.find("type");
  if (type_it == request.end() || !type_it->is_string()) {
    return {error_reply(from, gen, id, "store: request has no \"type\"")};
  }
  const std::string& type = type_it->get_ref<const std::string&>();
  if (!id.is_number_integer()) {
    return {error_reply(from, gen, id, type + ": request needs an integer \"id\"")};
  }
  if (type == "gen.check") {
    return {{from, gen,
             json{{"type", "gen.ok"}, {"id", id}, {"current", gen == generation_ && gen >= 0},
                  {"generation", generation_}}}};
  }
  if (type != "kv.set" && type != "kv.get" && type != "kv.wait" && type != "kv.add") {
    return {error_reply(from, gen, id,
                        "store: unknown request type '" + type +
                            "'; expected kv.set, kv.get, kv.wait, kv.add or gen.check")};
  }
  if (gen != generation_) {
    const char* age = gen < generation_ ? "stale" : "unknown";
    return {error_reply(from, gen, id,
                        type + ": " + age + " generation " + std::to_string(gen) + " (current " +
                            std::to_string(generation_) + ")")};
  }
  if (type == "kv.set") return handle_set(from, gen, id, request);
  if (type == "kv.add") return handle_add(from, gen, id, request);
  if (type == "kv.wait") return handle_wait(from, gen, id, request, now_ms);

  auto key = request.find("key");
  if (key == request.end()) return {error_reply(from, gen, id, "kv.get: missing \"key\"")};
  if (std::string problem = key_problem(*key); !problem.empty()) {
    return {error_reply(from, gen, id, "kv.get: " + problem)};
  }
  auto found = values_.find(key->get<std::string>());
  json value = found == values_.end() ? json(nullptr) : json(found->second);
  return {{from, gen, json{{"type", "kv.value"}, {"id", id}, {"value", value}}}};
}

std::vector<StoreReply> KvStore::handle_set(const Requester& from, int gen, const json& id,
                                            const json& request) {
  auto key = request.find("key");
  auto value = request.find("value");
  if (key == request.end() || value == request.end()) {
    return {error_reply(from, gen, id, "kv.set: needs \"key\" and \"value\"")};
  }
  if (std::string problem = key_problem(*key); !problem.empty()) {
    return {error_reply(from, gen, id, "kv.set: " + problem)};
  }
  const std::string& key_text = key->get_ref<const std::string&>();
  if (!value->is_string()) {
    return {error_reply(from, gen, id,
                        "kv.set " + quote_key(key_text) + ": value must be a string (hex for binary)")};
  }
  const std::string& value_text = value->get_ref<const std::string&>();
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
  if (std::optional<std::string> full = put(key_text, value_text)) {
    return {error_reply(from, gen, id, "kv.set " + quote_key(key_text) + ": " + *full)};
  }
  std::vector<StoreReply> replies{{from, gen, json{{"type", "kv.ok"}, {"id", id}}}};
  for (StoreReply& done : complete_ready_waits()) replies.push_back(std::move(done));
  return replies;
}

// Atomic because the store is single-threaded: read, add, write and reply happen in one call.
std::vector<StoreReply> KvStore::handle_add(const Requester& from, int gen, const json& id,
                                            const json& request) {
  auto key = request.find("key");
  auto delta = request.find("delta");
  if (key == request.end() || delta == request.end()) {
    return {error_reply(from, gen, id, "kv.add: needs \"key\" and \"delta\"")};
  }
  if (std::string problem = key_problem(*key); !problem.empty()) {
    return {error_reply(from, gen, id, "kv.add: " + problem)};
  }
  const std::string& key_text = key->get_ref<const std::string&>();
  if (!delta->is_number_integer()) {
    return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": \"delta\" must be an integer, got " +
                                           delta->dump())};
  }
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
  int64_t step = delta->get<int64_t>();
  if (__builtin_add_overflow(total, step, &total)) {
    return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": the sum overflows 64 bits")};
  }
  if (std::optional<std::string> full = put(key_text, std::to_string(total))) {
    return {error_reply(from, gen, id, "kv.add " + quote_key(key_text) + ": " + *full)};
  }
  std::vector<StoreReply> replies{{from, gen, json{{"type", "kv.value"}, {"id", id}, {"value", values_[key_text]}}}};
  for (StoreReply& done : complete_ready_waits()) replies.push_back(std::move(done));
  return replies;
}

std::optional<std::string> KvStore::put(const std::string& key, std::string value) {
  auto found = values_.find(key);
  size_t old_bytes = found == values_.end() ? 0 : key.size() + found->second.size();
  size_t new_total = total_bytes_ - old_bytes + key.size() + value.size();
  if (new_total > max_total_bytes_) {
    return "the store would hold " + std::to_string(new_total) + " bytes of keys and values in generation " +
           std::to_string(generation_) + ", over its limit of " + std::to_string(max_total_bytes_) +
           "; keep rendezvous data small (large state belongs in checkpoints or files)";
  }
  total_bytes_ = new_total;
  values_[key] = std::move(value);
  return std::nullopt;
}

std::vector<StoreReply> KvStore::handle_wait(const Requester& from, int gen, const json& id,
                                             const json& request, int64_t now_ms) {
  auto keys = request.find("keys");
  if (keys == request.end() || !keys->is_array() || keys->empty()) {
    return {error_reply(from, gen, id, "kv.wait: needs a non-empty array \"keys\"")};
  }
  if (keys->size() > kMaxWaitKeys) {
    return {error_reply(from, gen, id,
                        "kv.wait: " + std::to_string(keys->size()) + " keys; the limit is " +
                            std::to_string(kMaxWaitKeys))};
  }
  Wait wait{from, gen, id, {}, kDefaultWaitTimeoutMs, 0};
  for (const json& key : *keys) {
    if (std::string problem = key_problem(key); !problem.empty()) {
      return {error_reply(from, gen, id, "kv.wait: " + problem)};
    }
    wait.keys.push_back(key.get<std::string>());
  }
  if (auto timeout = request.find("timeout_ms"); timeout != request.end()) {
    if (!timeout->is_number_integer() || timeout->get<int64_t>() < 0) {
      return {error_reply(from, gen, id,
                          "kv.wait: \"timeout_ms\" must be a non-negative integer, got " +
                              timeout->dump())};
    }
    wait.timeout_ms = std::min(timeout->get<int64_t>(), kMaxWaitTimeoutMs);
  }
  if (all_present(wait.keys)) {
    return {{from, gen, json{{"type", "kv.values"}, {"id", id}, {"values", values_of(wait.keys)}}}};
  }
  wait.deadline_ms = now_ms + wait.timeout_ms;
  if (wait.timeout_ms == 0) return expire_one(wait);
  waits_.push_back(std::move(wait));
  return {};
}

std::vector<StoreReply> KvStore::expire(int64_t now_ms) {
  std::vector<StoreReply> replies;
  std::vector<Wait> still_waiting;
  for (Wait& wait : waits_) {
    if (wait.deadline_ms <= now_ms) {
      for (StoreReply& reply : expire_one(wait)) replies.push_back(std::move(reply));
    } else {
      still_waiting.push_back(std::move(wait));
    }
  }
  waits_ = std::move(still_waiting);
  return replies;
}

std::vector<StoreReply> KvStore::expire_one(const Wait& wait) const {
  std::string missing;
  for (const std::string& key : wait.keys) {
    if (values_.contains(key)) continue;
    missing += (missing.empty() ? "" : ", ") + quote_key(key);
  }
  return {error_reply(wait.from, wait.gen, wait.id,
                      "kv.wait: timeout after " + seconds_text(wait.timeout_ms) +
                          " waiting for keys [" + missing +
                          "]; a peer did not publish them (did it crash or start late?)")};
}

void KvStore::forget(const Requester& who) {
  std::erase_if(waits_, [&](const Wait& wait) { return wait.from == who; });
}

std::optional<int64_t> KvStore::next_deadline_ms() const {
  std::optional<int64_t> earliest;
  for (const Wait& wait : waits_) {
    if (!earliest || wait.deadline_ms < *earliest) earliest = wait.deadline_ms;
  }
  return earliest;
}

bool KvStore::all_present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& key) { return values_.contains(key); });
}

json KvStore::values_of(const std::vector<std::string>& keys) const {
  json values = json::array();
  for (const std::string& key : keys) values.push_back(values_.at(key));
  return values;
}

std::vector<StoreReply> KvStore::complete_ready_waits() {
  std::vector<StoreReply> replies;
  std::vector<Wait> still_waiting;
  for (Wait& wait : waits_) {
    if (all_present(wait.keys)) {
      replies.push_back({wait.from, wait.gen,
                         json{{"type", "kv.values"}, {"id", wait.id}, {"values", values_of(wait.keys)}}});
    } else {
      still_waiting.push_back(std::move(wait));
    }
  }
  waits_ = std::move(still_waiting);
  return replies;
}

}  // namespace dtrain::store
