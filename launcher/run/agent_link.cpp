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

Result<std::vector<nlohmann::json>> AgentLink::receive(int64_t now_ms) {
  std::string bytes = connection_->take_received();
  std::vector<nlohmann::json> messages;
  if (bytes.empty()) return messages;
  last_heard_ms_ = now_ms;
  decoder_.feed(bytes);
  for (;;) {
    Result<std::optional<nlohmann::json>> next = decoder_.next();
    if (!next) return Error::infra("host " + host_ + ": " + next.error().message);
    if (!next->has_value()) break;
    messages.push_back(std::move(**next));
  }
  return messages;
}

void AgentLink::measure_offset(int64_t agent_time_ms, int64_t now_wall_ms) {
  int64_t round_trip = now_wall_ms - config_sent_wall_ms_;
  offset_ms_ = (config_sent_wall_ms_ + round_trip / 2) - agent_time_ms;
}

}  // namespace dtrain::run
