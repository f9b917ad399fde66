#pragma once
// What a relay sends the supervisor for the hosts it carries (relay_messages.h; issue 32). At
// 16,384 hosts every host's beat and pong was a frame of its own on the relay's link, its bytes
// in base64: decoding those was two thirds of the supervisor's loop. The batcher reads each
// host's stream into frames and holds its beats and pongs (those it can parse whole) for up to
// kRelayBatchHoldMs, then sends them as one relay_batch; every other frame goes on byte for byte
// in relay_from. Both the relay (agent/relay.cpp) and dtrain-sim's simulated relays use it.
//
// Order: a host's frames reach the supervisor in the order the host sent them. Before a host's
// other frame goes out, everything held is sent; before a host's beat is held, that host's other
// frames of the same read are sent. A stream whose framing broke (a length over the limit) is
// passed on as it is from there on, so the supervisor sees the break and says what it was.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "launcher/proto/agent_frame_parser.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/frame.h"

namespace dtrain::proto {

class RelayBatcher {
 public:
  /// Receives relay_from and relay_batch messages, in the order they must be sent.
  using Send = std::function<void(AgentMessage)>;

  explicit RelayBatcher(Send send);

  /// What `host`'s agent sent since the last call (any piece of its stream) and what it wrote
  /// to stderr. `now_ms` is a monotonic clock: the first message held starts the hold.
  void received(const std::string& host, std::string_view bytes, std::string diagnostics, int64_t now_ms);
  /// Sends what is held once it has waited kRelayBatchHoldMs.
  void flush_due(int64_t now_ms);
  /// Sends what is held now (before a host's session ends, or the relay's).
  void flush();
  /// `host`'s session ended: what it held is sent, its stream forgotten.
  void forget(const std::string& host);

  bool holding() const { return !held_.messages.empty(); }
  /// When flush_due() will send what is held (meaningful while holding()).
  int64_t due_ms() const { return held_since_ms_ + kRelayBatchHoldMs; }

 private:
  struct Stream {
    FrameDecoder decoder;
    bool passthrough = false;  ///< its framing broke: bytes go on as they come
    int64_t held_in_batch = -1;  ///< the batch its newest held message went into
  };
  /// Whether the batch being gathered holds a message of this stream's host.
  bool holds(const Stream& stream) const { return holding() && stream.held_in_batch == batches_sent_; }
  /// `frames` (whole frames of `host`, or a broken stream's bytes) in relay_from pieces.
  void send_raw(const std::string& host, std::string& frames, std::string& diagnostics);
  void hold(const std::string& host, std::variant<AgentBeat, Pong> message, size_t bytes, int64_t now_ms);

  Send send_;
  AgentFrameParser parser_;
  std::unordered_map<std::string, Stream> streams_;
  RelayBatchReport held_;
  size_t held_bytes_ = 0;
  int64_t batches_sent_ = 0;  ///< also the number of the batch being gathered
  int64_t held_since_ms_ = 0;
};

}  // namespace dtrain::proto
