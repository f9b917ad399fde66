// No side sends a frame its peer would refuse (issue 26): a frame over kMaxFrameBytes makes the
// receiving decoder fail for good, which cost an agent its connection and the supervisor the
// host. encode_frame_checked() refuses it; the supervisor's AgentLink::send reports the refusal
// and keeps the link; the agent's Outbox sends an error frame that names it instead.
#include <doctest/doctest.h>

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "launcher/agent/outbox.h"
#include "launcher/base/fd.h"
#include "launcher/proto/frame.h"
#include "launcher/run/agent_link.h"
#include "tests/unit/recording_connection.h"

using dtrain::Error;
using dtrain::proto::encode_frame_checked;
using dtrain::proto::FrameDecoder;
using dtrain::proto::kMaxFrameBytes;
using nlohmann::json;

using dtrain::testing::RecordingConnection;

namespace {

/// A message whose compact JSON body is exactly `body_bytes` long.
json message_of_body(size_t body_bytes) {
  json message = {{"type", "to_worker"}, {"pad", ""}};
  size_t overhead = message.dump().size();
  message["pad"] = std::string(body_bytes - overhead, 'x');
  return message;
}

std::vector<json> decode_all(const std::string& bytes) {
  FrameDecoder decoder;
  decoder.feed(bytes);
  std::vector<json> messages;
  for (;;) {
    auto next = decoder.next();
    REQUIRE(next.ok());
    if (!next->has_value()) return messages;
    messages.push_back(**next);
  }
}

}  // namespace

TEST_CASE("frame limit: a body of exactly the limit is framed, one byte more is refused naming type, size and limit") {
  auto at_limit = encode_frame_checked(message_of_body(kMaxFrameBytes));
  REQUIRE(at_limit.ok());
  CHECK(at_limit->size() == 4 + kMaxFrameBytes);
  CHECK(decode_all(*at_limit).size() == 1);
  auto over = encode_frame_checked(message_of_body(kMaxFrameBytes + 1));
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message == "internal bug: a to_worker frame of 8388609 bytes is over the 8388608-byte frame "
                                "limit; not sent");
}

TEST_CASE("frame limit: AgentLink::send refuses an oversized message, reports it, and the link goes on") {
  std::string sent;
  std::vector<std::string> refusals;
  dtrain::run::AgentLink link("gpu07", std::make_unique<RecordingConnection>(sent), 0, 0,
                              [&](const Error& refused) { refusals.push_back(refused.message); });
  CHECK_FALSE(link.send(message_of_body(20 << 20)));
  CHECK(sent.empty());
  REQUIRE(refusals.size() == 1);
  CHECK(refusals[0] == "host gpu07: internal bug: a to_worker frame of 20971520 bytes is over the 8388608-byte "
                       "frame limit; not sent");
  CHECK(link.send({{"type", "ping"}, {"id", 1}}));
  auto decoded = decode_all(sent);
  REQUIRE(decoded.size() == 1);
  CHECK(decoded[0]["type"] == "ping");
}

TEST_CASE("frame limit: the agent's outbox sends an error frame about an oversized message instead of the message") {
  auto pipe = dtrain::make_pipe();
  REQUIRE(pipe.ok());
  dtrain::agent::Outbox outbox(pipe->write_end.get());
  // A log line whose frame body is 10 bytes over the limit.
  dtrain::proto::WorkerLogLine log{0, 3, "stdout", ""};
  log.line.assign(kMaxFrameBytes + 10 - dtrain::proto::to_json(log).dump().size(), 'x');
  outbox.send(log);
  outbox.send(dtrain::proto::Pong{2, std::nullopt, std::nullopt});
  outbox.flush_some();
  std::string bytes;
  REQUIRE(dtrain::set_nonblocking(pipe->read_end.get()).ok());
  bool would_block = false;
  while (dtrain::read_some(pipe->read_end.get(), bytes, &would_block).ok() && !would_block) {
  }
  auto decoded = decode_all(bytes);
  REQUIRE(decoded.size() == 2);
  CHECK(decoded[0]["type"] == "error");
  CHECK(decoded[0]["about"] == "log");
  CHECK(decoded[0]["message"] == "internal bug: a log frame of 8388618 bytes is over the 8388608-byte frame "
                                 "limit; not sent");
  CHECK(decoded[1]["type"] == "pong");
}
