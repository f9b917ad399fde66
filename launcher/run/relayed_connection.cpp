#include "launcher/run/relayed_connection.h"

#include "launcher/proto/relay_messages.h"

namespace dtrain::run {

RelayedConnection::RelayedConnection(std::string host, std::string relay, ToRelay to_relay)
    : host_(std::move(host)), relay_(std::move(relay)), to_relay_(std::move(to_relay)) {}

void RelayedConnection::deliver(std::string bytes, std::string diagnostics) {
  if (closed_) return;
  received_ += bytes;
  diagnostics_ += diagnostics;
}

void RelayedConnection::end(std::string reason) {
  if (closed_) return;
  closed_ = true;
  close_reason_ = std::move(reason);
}

void RelayedConnection::send(std::string bytes) {
  if (closed_ || input_closed_) return;
  // In pieces: a whole frame (up to proto::kMaxFrameBytes) would pass the limit once in base64.
  for (size_t offset = 0; offset < bytes.size(); offset += proto::kMaxRelayChunkBytes) {
    if (!to_relay_(proto::RelayToRequest{host_, bytes.substr(offset, proto::kMaxRelayChunkBytes)})) return;
  }
}

void RelayedConnection::close_input() {
  if (input_closed_ || closed_) return;
  input_closed_ = true;
  to_relay_(proto::RelayCloseRequest{host_});
}

void RelayedConnection::shutdown(int) {
  close_input();
  end("shut down");
}

}  // namespace dtrain::run
