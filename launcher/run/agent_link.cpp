#include "launcher/run/agent_link.h"

namespace dtrain::run {

AgentLink::AgentLink(std::string host, std::unique_ptr<transport::AgentConnection> connection,
                     int64_t now_ms, int64_t now_wall_ms)
    : host_(std::move(host)),
      connection_(std::move(connection)),
      last_heard_ms_(now_ms),
      config_sent_wall_ms_(now_wall_ms) {}

void AgentLink::send(const nlohmann::json& message) {
  connection_->send(proto::encode_frame(message));
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
