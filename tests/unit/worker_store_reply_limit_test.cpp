// The store and dtrain's C++ worker client agree on the longest reply (issue 26): the largest
// kv.value reply the store is willing to send (kMaxReplyBytes, one line) reaches a worker's
// kv().get whole, and one byte more is not sent: the worker gets the store's error instead of a
// line its client would close the connection over. The agent's end is scripted; the replies are
// the real KvStore's.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/store/kv_store.h"
#include "tests/store_json.h"
#include "tests/unit/fd_lines.h"
#include "tests/unit/temp_dir.h"
#include "worker/contract/wire.h"
#include "worker/runtime/worker.h"

using KvStore = dtrain::testing::JsonStore;
using dtrain::testing::read_line;
using dtrain::testing::write_all;
using nlohmann::json;

namespace {

/// A value whose kv.value reply to request id `id` is exactly `reply_bytes` long.
std::string value_for_reply(int64_t id, size_t reply_bytes) {
  size_t envelope = json{{"type", "kv.value"}, {"id", id}, {"value", ""}}.dump().size();
  return std::string(reply_bytes - envelope, 'v');
}

/// A worker's kv().get(key) answered by `store` through a scripted agent: the result as the
/// worker sees it, the length of the line that answered it, and whether the connection stayed
/// usable (a second get is answered).
void get_through_agent(KvStore& store, const std::string& key, dtrain::worker::Result<std::optional<std::string>>& got,
                       size_t& reply_line_bytes, bool& usable_after) {
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";
  auto script = [&](int connection) {
    read_line(connection);  // hello
    for (;;) {
      json request = json::parse(read_line(connection), nullptr, false);
      if (!request.is_object()) return;  // the worker went away
      if (!request.contains("id")) continue;  // beat, bye: nothing to answer
      auto replies = store.handle({"localhost", 0}, 0, request, 0);
      for (const auto& reply : replies) {
        std::string line = reply.msg.dump();
        if (request.value("key", "") == key) reply_line_bytes = line.size();
        write_all(connection, line + "\n");
      }
    }
  };
  dtrain::testing::ScriptedAgent agent(path, script);
  dtrain::testing::AgentSocketEnv socket_env(path);
  auto worker = dtrain::worker::Worker::from_env();
  REQUIRE_MESSAGE(worker.ok(), (worker.ok() ? "" : worker.error().message));
  got = (*worker)->kv().get(key);
  usable_after = (*worker)->kv().get("small").ok();
}

}  // namespace

TEST_CASE("worker store reply limit: the longest reply the store sends reaches a C++ worker whole, one byte more is an error") {
  constexpr size_t kLimit = dtrain::store::kMaxReplyBytes;
  static_assert(kLimit == dtrain::contract::wire::kMaxLineBytes);
  // The worker numbers its requests from 1: its first kv.get has id 1.
  for (size_t reply_bytes : {kLimit, kLimit + 1}) {
    CAPTURE(reply_bytes);
    KvStore store;
    store.begin_generation(0, 0);
    const std::string value = value_for_reply(1, reply_bytes);
    REQUIRE(store.handle({"localhost", 0}, 0, {{"type", "kv.set"}, {"id", 1}, {"key", "big"}, {"value", value}}, 0)[0]
                .msg["type"] == "kv.ok");
    REQUIRE(store.handle({"localhost", 0}, 0, {{"type", "kv.set"}, {"id", 2}, {"key", "small"}, {"value", "s"}}, 0)[0]
                .msg["type"] == "kv.ok");
    dtrain::worker::Result<std::optional<std::string>> got = std::optional<std::string>();
    bool usable_after = false;
    size_t line_bytes = 0;
    get_through_agent(store, "big", got, line_bytes, usable_after);
    if (reply_bytes == kLimit) {
      CHECK(line_bytes == kLimit);
      REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
      CHECK(**got == value);
    } else {
      REQUIRE_FALSE(got.ok());
      CHECK(got.error().message.find("reply would be " + std::to_string(kLimit + 1) + " bytes, over the " +
                                     std::to_string(kLimit) + " limit") != std::string::npos);
    }
    CHECK(usable_after);
  }
}
