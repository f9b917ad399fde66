#include <doctest/doctest.h>

#include <string>

#include "launcher/store/kv_store.h"
#include "tests/store_json.h"

using dtrain::store::KvLimits;
using dtrain::testing::JsonStore;
using dtrain::store::Requester;
using StoreReply = dtrain::testing::JsonStoreReply;
using nlohmann::json;

namespace {

const Requester kRank0{"hostA", 0};
const Requester kRank1{"hostB", 1};

json set_request(int id, const std::string& key, const std::string& value) {
  return {{"type", "kv.set"}, {"id", id}, {"key", key}, {"value", value}};
}
json get_request(int id, const std::string& key) {
  return {{"type", "kv.get"}, {"id", id}, {"key", key}};
}
json wait_request(int id, std::vector<std::string> keys, int64_t timeout_ms) {
  return {{"type", "kv.wait"}, {"id", id}, {"keys", keys}, {"timeout_ms", timeout_ms}};
}
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
std::string error_of(const StoreReply& reply) {
  REQUIRE(reply.msg["type"] == "error");
  return reply.msg["error"].get<std::string>();
}

}  // namespace

TEST_CASE("store: set then get returns the value, an unknown key gives null") {
  JsonStore store;
  store.begin_generation(1, 0);
  auto set = store.handle(kRank0, 1, set_request(7, "addr/0", "10.0.0.1:4000"), 0);
  REQUIRE(set.size() == 1);
  CHECK(set[0].to == kRank0);
  CHECK(set[0].gen == 1);
  CHECK(set[0].msg == json{{"type", "kv.ok"}, {"id", 7}});

  auto got = store.handle(kRank1, 1, get_request(8, "addr/0"), 0);
  REQUIRE(got.size() == 1);
  CHECK(got[0].to == kRank1);
  CHECK(got[0].msg == json{{"type", "kv.value"}, {"id", 8}, {"value", "10.0.0.1:4000"}});

  auto missing = store.handle(kRank1, 1, get_request(9, "nope"), 0);
  CHECK(missing[0].msg["value"].is_null());
  CHECK(store.size() == 1);
}

TEST_CASE("store: a wait on present keys answers at once with the values in order") {
  JsonStore store;
  store.begin_generation(0, 0);
  (void)store.handle(kRank0, 0, set_request(1, "b", "2"), 0);
  (void)store.handle(kRank0, 0, set_request(2, "a", "1"), 0);
  auto replies = store.handle(kRank1, 0, wait_request(3, {"a", "b"}, 1000), 0);
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].msg == json{{"type", "kv.values"}, {"id", 3}, {"values", {"1", "2"}}});
  CHECK(store.pending_waits() == 0);
}

TEST_CASE("store: a pending wait is answered by the set that completes it, to the waiter") {
  JsonStore store;
  store.begin_generation(2, 0);
  CHECK(store.handle(kRank1, 2, wait_request(5, {"x", "y"}, 10'000), 100).empty());
  CHECK(store.next_deadline_ms() == 10'100);
  auto first = store.handle(kRank0, 2, set_request(1, "x", "vx"), 200);
  REQUIRE(first.size() == 1);  // only the setter's kv.ok: y is still missing
  auto second = store.handle(kRank0, 2, set_request(2, "y", "vy"), 300);
  REQUIRE(second.size() == 2);
  CHECK(second[0].to == kRank0);
  CHECK(second[0].msg["type"] == "kv.ok");
  CHECK(second[1].to == kRank1);
  CHECK(second[1].gen == 2);
  CHECK(second[1].msg == json{{"type", "kv.values"}, {"id", 5}, {"values", {"vx", "vy"}}});
  CHECK_FALSE(store.next_deadline_ms().has_value());
}

TEST_CASE("store: expire fails waits past their deadline, naming missing keys and timeout") {
  JsonStore store;
  store.begin_generation(1, 0);
  (void)store.handle(kRank0, 1, set_request(1, "have", "v"), 0);
  CHECK(store.handle(kRank1, 1, wait_request(4, {"have", "gloo/rank_3"}, 30'000), 1'000).empty());
  CHECK(store.expire(30'999).empty());
  auto expired = store.expire(31'000);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].to == kRank1);
  CHECK(expired[0].msg["id"] == 4);
  std::string message = error_of(expired[0]);
  CHECK(contains(message, "timeout after 30s"));
  CHECK(contains(message, "'gloo/rank_3'"));
  CHECK_FALSE(contains(message, "'have'"));
  CHECK(store.pending_waits() == 0);
}

TEST_CASE("store: a wait with timeout 0 on a missing key fails at once") {
  JsonStore store;
  store.begin_generation(1, 0);
  auto replies = store.handle(kRank0, 1, wait_request(1, {"k"}, 0), 0);
  REQUIRE(replies.size() == 1);
  CHECK(contains(error_of(replies[0]), "'k'"));
}

TEST_CASE("store: a new generation hides old keys and fails old waits") {
  JsonStore store;
  CHECK(store.current_generation() == -1);
  store.begin_generation(3, 0);
  (void)store.handle(kRank0, 3, set_request(1, "master", "old"), 0);
  CHECK(store.handle(kRank1, 3, wait_request(2, {"never"}, 60'000), 0).empty());

  auto failed = store.begin_generation(4, 10);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].to == kRank1);
  CHECK(failed[0].gen == 3);
  CHECK(contains(error_of(failed[0]), "generation 3 ended"));
  CHECK(store.current_generation() == 4);
  CHECK(store.size() == 0);
  CHECK(store.pending_waits() == 0);

  auto got = store.handle(kRank0, 4, get_request(3, "master"), 20);
  CHECK(got[0].msg["value"].is_null());
  CHECK(store.begin_generation(4, 30).empty());  // not newer: nothing changes
  CHECK(store.begin_generation(2, 30).empty());
  CHECK(store.current_generation() == 4);
}

TEST_CASE("store: requests from a stale generation are refused and store nothing") {
  JsonStore store;
  store.begin_generation(4, 0);
  auto set = store.handle(kRank0, 3, set_request(1, "ckpt/40", "done"), 0);
  REQUIRE(set.size() == 1);
  CHECK(set[0].msg["id"] == 1);
  CHECK(error_of(set[0]) == "kv.set: stale generation 3 (current 4)");
  CHECK(store.size() == 0);
  CHECK(contains(error_of(store.handle(kRank0, 3, get_request(2, "k"), 0)[0]), "stale generation 3"));
  CHECK(contains(error_of(store.handle(kRank0, 3, wait_request(3, {"k"}, 5), 0)[0]),
                 "stale generation 3"));
  CHECK(contains(error_of(store.handle(kRank0, 5, get_request(4, "k"), 0)[0]),
                 "unknown generation 5 (current 4)"));
}

TEST_CASE("store: gen.check says whether the asking generation is current") {
  JsonStore store;
  store.begin_generation(4, 0);
  auto current = store.handle(kRank0, 4, {{"type", "gen.check"}, {"id", 11}}, 0);
  CHECK(current[0].msg["type"] == "gen.ok");
  CHECK(current[0].msg["id"] == 11);
  CHECK(current[0].msg["current"] == true);
  auto stale = store.handle(kRank0, 3, {{"type", "gen.check"}, {"id", 12}}, 0);
  CHECK(stale[0].msg["current"] == false);
  CHECK(stale[0].msg["generation"] == 4);
}

TEST_CASE("store: limits on key size, value size and key count are errors, not crashes") {
  JsonStore store;
  store.begin_generation(1, 0);
  std::string long_key(dtrain::store::kMaxKeyBytes + 1, 'k');
  CHECK(contains(error_of(store.handle(kRank0, 1, set_request(1, long_key, "v"), 0)[0]),
                 "513 bytes exceeds the 512-byte limit"));
  std::string max_key(dtrain::store::kMaxKeyBytes, 'k');
  CHECK(store.handle(kRank0, 1, set_request(2, max_key, "v"), 0)[0].msg["type"] == "kv.ok");

  std::string big_value(dtrain::store::kMaxValueBytes + 1, 'v');
  CHECK(contains(error_of(store.handle(kRank0, 1, set_request(3, "big", big_value), 0)[0]),
                 "exceeds the 1048576-byte limit"));
  CHECK_FALSE(store.handle(kRank0, 1, get_request(4, "big"), 0)[0].msg["value"].is_string());

  for (size_t i = store.size(); i < dtrain::store::kMaxKeys; ++i) {
    REQUIRE(store.handle(kRank0, 1, set_request(5, "k" + std::to_string(i), "v"), 0)[0].msg["type"] ==
            "kv.ok");
  }
  CHECK(contains(error_of(store.handle(kRank0, 1, set_request(6, "one-more", "v"), 0)[0]),
                 "100000 keys"));
  // Overwriting an existing key is still allowed at the limit.
  CHECK(store.handle(kRank0, 1, set_request(7, "k5", "new"), 0)[0].msg["type"] == "kv.ok");
}

TEST_CASE("store: malformed requests get an error reply that says what is wrong") {
  // Types and shapes are checked where the line is parsed (proto::parse_worker_message); what
  // only the store can judge (an empty key) is checked by the store. Either way: an error reply.
  JsonStore store;
  store.begin_generation(1, 0);
  CHECK(contains(error_of(store.handle(kRank0, 1, json::array(), 0)[0]), "not an object"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"id", 1}}, 0)[0]), "no string \"type\""));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.get"}, {"key", "k"}}, 0)[0]),
                 "kv.get.id: missing (expected an integer)"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.pop"}, {"id", 1}}, 0)[0]),
                 "unknown message type 'kv.pop'"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.set"}, {"id", 1}, {"key", "k"}}, 0)[0]),
                 "kv.set.value: missing"));
  CHECK(contains(error_of(store.handle(kRank0, 1, set_request(1, "", "v"), 0)[0]), "kv.set: key must not be empty"));
  CHECK(contains(error_of(store.handle(kRank0, 1,
                                       {{"type", "kv.set"}, {"id", 1}, {"key", "k"}, {"value", 5}}, 0)[0]),
                 "kv.set.value: expected a string"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.wait"}, {"id", 1}, {"keys", json::array()}}, 0)[0]),
                 "kv.wait.keys: expected at least one key"));
  CHECK(contains(error_of(store.handle(kRank0, 1,
                                       {{"type", "kv.wait"}, {"id", 1}, {"keys", {"a"}}, {"timeout_ms", -5}}, 0)[0]),
                 "kv.wait.timeout_ms: -5 is out of range"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.wait"}, {"id", 1}, {"keys", {"a", 3}}}, 0)[0]),
                 "kv.wait.keys: expected an array of strings, one item is not"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.wait"}, {"id", 1}, {"keys", {""}}}, 0)[0]),
                 "kv.wait: key must not be empty"));
  CHECK(store.size() == 0);
  CHECK(store.pending_waits() == 0);
}

TEST_CASE("store: a wait without timeout uses the default and forget drops a gone worker's waits") {
  JsonStore store;
  store.begin_generation(1, 0);
  CHECK(store.handle(kRank0, 1, {{"type", "kv.wait"}, {"id", 1}, {"keys", {"a"}}}, 1000).empty());
  CHECK(store.next_deadline_ms() == 1000 + dtrain::store::kDefaultWaitTimeoutMs);
  CHECK(store.handle(kRank1, 1, wait_request(2, {"a"}, 500), 1000).empty());
  CHECK(store.next_deadline_ms() == 1500);
  store.forget(kRank1);
  CHECK(store.pending_waits() == 1);
  auto replies = store.handle(kRank1, 1, set_request(3, "a", "v"), 1100);
  REQUIRE(replies.size() == 2);
  CHECK(replies[1].to == kRank0);
}

TEST_CASE("store: kv.add is atomic, starts from 0, wakes waiters, and refuses non-numbers") {
  JsonStore store;
  store.begin_generation(2, 0);
  auto add = [&](const Requester& who, int id, const std::string& key, json delta) {
    return store.handle(who, 2, {{"type", "kv.add"}, {"id", id}, {"key", key}, {"delta", delta}}, 0);
  };
  auto pending = store.handle(kRank1, 2, wait_request(1, {"count"}, 1000), 0);
  CHECK(pending.empty());
  auto first = add(kRank0, 2, "count", 1);
  REQUIRE(first.size() == 2);  // the adder's kv.value, then the waiter's kv.values
  CHECK(first[0].msg["type"] == "kv.value");
  CHECK(first[0].msg["value"] == "1");
  CHECK(first[1].to == kRank1);
  CHECK(first[1].msg["values"][0] == "1");
  // Two ranks adding in turn never get the same number back.
  CHECK(add(kRank1, 3, "count", 1)[0].msg["value"] == "2");
  CHECK(add(kRank0, 4, "count", 5)[0].msg["value"] == "7");
  CHECK(add(kRank0, 5, "count", -7)[0].msg["value"] == "0");
  CHECK(store.handle(kRank0, 2, get_request(6, "count"), 0)[0].msg["value"] == "0");

  store.handle(kRank0, 2, set_request(7, "addr", "10.0.0.1"), 0);
  CHECK(contains(error_of(add(kRank0, 8, "addr", 1)[0]), "not a decimal integer"));
  CHECK(contains(error_of(add(kRank0, 9, "count", "1")[0]), "kv.add.delta: expected an integer"));
  CHECK(contains(error_of(store.handle(kRank0, 1, {{"type", "kv.add"}, {"id", 10}, {"key", "count"}, {"delta", 1}}, 0)[0]),
                 "stale generation 1"));
}

TEST_CASE("store: keys and values together are capped, overwriting counts the old value out, a new generation starts empty") {
  JsonStore store(KvLimits{.max_total_bytes = 100});
  store.begin_generation(1, 0);
  CHECK(store.handle(kRank0, 1, set_request(1, "a", std::string(40, 'x')), 0)[0].msg["type"] == "kv.ok");
  CHECK(store.handle(kRank0, 1, set_request(2, "b", std::string(40, 'y')), 0)[0].msg["type"] == "kv.ok");
  CHECK(store.total_bytes() == 82);
  auto full = store.handle(kRank1, 1, set_request(3, "c", std::string(40, 'z')), 0);
  REQUIRE(full.size() == 1);
  std::string error = error_of(full[0]);
  CHECK(contains(error, "kv.set 'c': the store would hold 123 bytes"));
  CHECK(contains(error, "over its limit of 100"));
  CHECK(store.handle(kRank1, 1, get_request(4, "c"), 0)[0].msg["value"].is_null());  // nothing stored
  // Replacing a value with a smaller one frees room.
  CHECK(store.handle(kRank0, 1, set_request(5, "a", "1"), 0)[0].msg["type"] == "kv.ok");
  CHECK(store.total_bytes() == 43);
  CHECK(store.handle(kRank1, 1, set_request(6, "c", std::string(40, 'z')), 0)[0].msg["type"] == "kv.ok");
  // kv.add is held to the same cap.
  json add = {{"type", "kv.add"}, {"id", 7}, {"key", std::string(60, 'k')}, {"delta", 1}};
  CHECK(contains(error_of(store.handle(kRank0, 1, add, 0)[0]), "over its limit of 100"));
  store.begin_generation(2, 0);
  CHECK(store.total_bytes() == 0);
  CHECK(store.handle(kRank0, 2, set_request(8, "d", std::string(90, 'w')), 0)[0].msg["type"] == "kv.ok");
}
