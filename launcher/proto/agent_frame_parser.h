#pragma once
// Frame body → typed agent message: what the supervisor's driver calls for every frame an agent
// sends. The answer is exactly parse_frame_body() then parse_agent_message() (the generic path,
// over nlohmann's DOM), message for message and error for error; only the cost differs. A beat
// — one per host per heartbeat interval, 2,048 a second at 2,048 hosts, carrying every rank's
// held worker beat — is read with simdjson's DOM straight into AgentBeat: building nlohmann's
// std::map-based DOM for it was a third of the supervisor loop.
//
// The fast path only ever accepts: a body it has any doubt about (not a beat, a field of the
// wrong type or out of range, a worker message that is not a valid beat, a \u escape or a raw
// control byte, where the two JSON parsers' corner cases differ) goes the generic way, which
// words the error. So both paths share one set of error texts, and a beat accepted fast is one
// the generic path accepts with the same fields (proto_messages_test and the agent_frame fuzz
// target compare the two).

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "launcher/base/result.h"
#include "launcher/proto/agent_messages.h"

namespace dtrain::proto {

/// Bodies larger than this (a beat of a host with thousands of GPUs, a flight-recorder dump)
/// take the generic path: the simdjson parser keeps buffers as large as the largest document it
/// has read, for as long as it lives.
inline constexpr size_t kMaxFastFrameBytes = 1 << 20;

class AgentFrameParser {
 public:
  AgentFrameParser();
  ~AgentFrameParser();
  AgentFrameParser(const AgentFrameParser&) = delete;
  AgentFrameParser& operator=(const AgentFrameParser&) = delete;

  /// The message in one frame body (FrameDecoder::next_body), or the Error that
  /// parse_frame_body or parse_agent_message gives for it. Never throws.
  Result<AgentMessage> parse(std::string_view body);

  /// The fast path alone (tests, fuzzing): the beat in `body`, or nullopt when `body` is not a
  /// beat that passes every check (parse() then takes the generic path).
  std::optional<AgentBeat> read_beat(std::string_view body);
  /// The same for relay_from, which carries a relayed host's stream (most of the bytes at scale).
  std::optional<RelayFromReport> read_relay_from(std::string_view body);
  /// And for pong, every host's answer to each ping.
  std::optional<Pong> read_pong(std::string_view body);
  /// And for relay_batch, a relay's hosts' beats and pongs in one frame.
  std::optional<RelayBatchReport> read_relay_batch(std::string_view body);

  /// How many bodies parse() read on a fast path (tests: a frame meant for one takes it).
  uint64_t fast_parses() const { return fast_parses_; }

 private:
  uint64_t fast_parses_ = 0;
  struct Simdjson;  // keeps simdjson.h (large) out of the driver's includes
  std::unique_ptr<Simdjson> simdjson_;
};

}  // namespace dtrain::proto
