#include "launcher/run/agent_link.h"

#include <cstdio>

#include "launcher/store/kv_store.h"

namespace dtrain::run {

// The store's largest reply travels in a to_worker frame with a few fields around it.
static_assert(store::kMaxReplyBytes + 4096 < proto::kMaxFrameBytes,
              "a store reply the workers accept must fit the frame that carries it to their agent");

AgentLink::AgentLink(std::string host, std::unique_ptr<transport::AgentConnection> connection,
                     int64_t now_ms, int64_t now_wall_ms, RefusalHandler on_refused)
    : host_(std::move(host)),
      connection_(std::move(connection)),
      on_refused_(std::move(on_refused)),
      last_heard_ms_(now_ms),
      config_sent_wall_ms_(now_wall_ms) {}

void AgentLink::replace_connection(std::unique_ptr<transport::AgentConnection> connection, int64_t now_ms,
                                   int64_t now_wall_ms) {
  connection_->shutdown(0);
  connection_ = std::move(connection);
  decoder_ = proto::FrameDecoder{};
  last_heard_ms_ = now_ms;
  config_sent_wall_ms_ = now_wall_ms;  // a fresh agent's hello measures its offset from here
}

bool AgentLink::send(const proto::SupervisorMessage& message) { return send_frame(proto::encode_supervisor_frame(message)); }

bool AgentLink::send(const nlohmann::json& message) { return send_frame(proto::encode_frame_checked(message)); }

bool AgentLink::send_frame(Result<std::string> frame) {
  if (frame) {
    connection_->send(*frame);
    return true;
  }
  Error refused{frame.error().kind, "host " + host_ + ": " + frame.error().message};
  if (on_refused_) {
    on_refused_(refused);
  } else {
    std::fprintf(stderr, "dtrain: %s\n", refused.message.c_str());
  }
  return false;
}

Result<AgentLink::Received> AgentLink::receive(int64_t now_ms) {
  std::string bytes = connection_->take_received();
  Received received;
  if (bytes.empty()) return received;
  last_heard_ms_ = now_ms;
  decoder_.feed(bytes);
  for (;;) {
    Result<std::optional<std::string_view>> body = decoder_.next_body();
    if (!body) return Error::infra("host " + host_ + ": " + body.error().message);
    if (!body->has_value()) break;
    received.frames.emplace_back(**body);
  }
  return received;
}

void AgentLink::measure_offset(int64_t agent_time_ms, int64_t now_wall_ms) {
  int64_t round_trip = now_wall_ms - config_sent_wall_ms_;
  offset_ms_ = (config_sent_wall_ms_ + round_trip / 2) - agent_time_ms;
  offset_round_trip_ms_ = round_trip;
}

void AgentLink::refine_offset(int64_t ping_sent_wall_ms, int64_t agent_time_ms, int64_t now_wall_ms) {
  if (connection_->local_pid()) return;  // a local agent shares our clock: offset 0 is exact
  int64_t round_trip = now_wall_ms - ping_sent_wall_ms;
  if (round_trip < 0) return;  // the wall clock stepped back: no information
  if (offset_round_trip_ms_ >= 0 && round_trip >= offset_round_trip_ms_) return;
  offset_ms_ = (ping_sent_wall_ms + round_trip / 2) - agent_time_ms;
  offset_round_trip_ms_ = round_trip;
}

}  // namespace dtrain::run
