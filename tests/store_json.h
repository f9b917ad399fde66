#pragma once
// The store as the driver reaches it, for tests written in JSON: a worker's line is parsed by
// proto::parse_worker_message (the boundary), a store request reaches KvStore typed, and a line
// that does not parse is answered with an error, as the driver answers a request it could not
// read. Replies come back as the JSON line the worker would read.

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/json_fields.h"
#include "launcher/proto/worker_messages.h"
#include "launcher/store/kv_store.h"

namespace dtrain::testing {

struct JsonStoreReply {
  store::Requester to;
  int gen = -1;
  nlohmann::json msg;
};

inline std::vector<JsonStoreReply> as_json(const std::vector<store::StoreReply>& replies) {
  std::vector<JsonStoreReply> out;
  for (const store::StoreReply& reply : replies) out.push_back({reply.to, reply.gen, proto::to_json(reply.msg)});
  return out;
}

class JsonStore {
 public:
  explicit JsonStore(store::KvLimits limits = {}) : store_(limits) {}

  std::vector<JsonStoreReply> handle(const store::Requester& from, int gen, const nlohmann::json& request,
                                     int64_t now_ms) {
    Result<proto::WorkerMessage> message = proto::parse_worker_message(request);
    auto refuse = [&](std::string error) {
      int64_t id = json_int(request, "id").value_or(0);
      return as_json({store::StoreReply{from, gen, proto::RequestFailed{id, std::move(error)}}});
    };
    if (!message) return refuse(message.error().message);
    return std::visit(
        [&](const auto& typed) -> std::vector<JsonStoreReply> {
          if constexpr (std::is_constructible_v<store::StoreRequest, decltype(typed)>) {
            return as_json(store_.handle(from, gen, store::StoreRequest(typed), now_ms));
          } else {
            return refuse(std::string(proto::type_of(*message)) + " is not a store request");
          }
        },
        *message);
  }
  std::vector<JsonStoreReply> begin_generation(int gen, int64_t now_ms) {
    return as_json(store_.begin_generation(gen, now_ms));
  }
  std::vector<JsonStoreReply> expire(int64_t now_ms) { return as_json(store_.expire(now_ms)); }
  void forget(const store::Requester& who) { store_.forget(who); }
  std::optional<int64_t> next_deadline_ms() const { return store_.next_deadline_ms(); }
  int current_generation() const { return store_.current_generation(); }
  size_t size() const { return store_.size(); }
  size_t total_bytes() const { return store_.total_bytes(); }
  size_t pending_waits() const { return store_.pending_waits(); }
  store::KvStore& typed() { return store_; }

 private:
  store::KvStore store_;
};

}  // namespace dtrain::testing
