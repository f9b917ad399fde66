#include "launcher/proto/relay_batcher.h"

#include <utility>

#include "launcher/proto/relay_messages.h"

namespace dtrain::proto {

namespace {

/// The beat or pong in `body`, when the fast parser takes it whole; anything else (another type,
/// a field it doubts) travels as the host sent it.
std::optional<std::variant<AgentBeat, Pong>> batchable(AgentFrameParser& parser, std::string_view body) {
  if (body.find(R"("type":"beat")") != std::string_view::npos) {
    if (std::optional<AgentBeat> beat = parser.read_beat(body)) return std::move(*beat);
  } else if (body.find(R"("type":"pong")") != std::string_view::npos) {
    if (std::optional<Pong> pong = parser.read_pong(body)) return *pong;
  }
  return std::nullopt;
}

/// What a held message adds to the batch's frame, near enough: its body, its host, the wrapping.
size_t held_cost(const std::string& host, size_t body_bytes) { return body_bytes + host.size() + 32; }

}  // namespace

RelayBatcher::RelayBatcher(Send send) : send_(std::move(send)) {}

void RelayBatcher::received(const std::string& host, std::string_view bytes, std::string diagnostics, int64_t now_ms) {
  Stream& stream = streams_[host];
  std::string raw;
  if (stream.passthrough) {
    raw.assign(bytes);
  } else {
    stream.decoder.feed(bytes);
    for (;;) {
      Result<std::optional<std::string_view>> body = stream.decoder.next_body();
      if (!body) {
        // The framing is lost: the supervisor must read the same bytes to say what broke.
        stream.passthrough = true;
        if (holds(stream)) flush();
        raw += stream.decoder.take_buffered();
        break;
      }
      if (!body->has_value()) break;
      std::string_view frame = **body;
      if (std::optional<std::variant<AgentBeat, Pong>> message = batchable(parser_, frame)) {
        send_raw(host, raw, diagnostics);  // this host's frames before it go first
        hold(host, std::move(*message), held_cost(host, frame.size()), now_ms);
        stream.held_in_batch = batches_sent_;  // the batch now being gathered
      } else {
        // Its held beats and pongs first (other hosts' may wait: order matters within a host).
        if (holds(stream)) flush();
        raw += frame_of_body(frame);
      }
    }
  }
  send_raw(host, raw, diagnostics);
}

void RelayBatcher::hold(const std::string& host, std::variant<AgentBeat, Pong> message, size_t cost, int64_t now_ms) {
  if (holding() && held_bytes_ + cost > kMaxRelayBatchBytes) flush();
  if (!holding()) held_since_ms_ = now_ms;
  held_.messages.push_back(RelayedMessage{host, std::move(message)});
  held_bytes_ += cost;
}

void RelayBatcher::send_raw(const std::string& host, std::string& frames, std::string& diagnostics) {
  // A piece at a time: a relay frame must stay far below the frame limit after base64.
  size_t offset = 0;
  while (offset < frames.size() || (offset == 0 && !diagnostics.empty())) {
    send_(RelayFromReport{host, frames.substr(offset, kMaxRelayChunkBytes), std::exchange(diagnostics, {})});
    offset += kMaxRelayChunkBytes;
  }
  frames.clear();
}

void RelayBatcher::flush_due(int64_t now_ms) {
  if (holding() && now_ms >= due_ms()) flush();
}

void RelayBatcher::flush() {
  if (!holding()) return;
  send_(std::exchange(held_, {}));
  held_bytes_ = 0;
  ++batches_sent_;
}

void RelayBatcher::forget(const std::string& host) {
  auto stream = streams_.find(host);
  if (stream == streams_.end()) return;
  if (holds(stream->second)) flush();
  // A frame cut short by the session's end reaches the supervisor as it was (it says so).
  std::string rest = stream->second.passthrough ? std::string() : stream->second.decoder.take_buffered();
  std::string no_diagnostics;
  send_raw(host, rest, no_diagnostics);
  streams_.erase(stream);
}

}  // namespace dtrain::proto
