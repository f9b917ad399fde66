// Framing of the agent ⇄ supervisor stream: what the supervisor and every agent rely on to
// never misread, never buffer without bound, and never crash on a broken peer.

#include <doctest/doctest.h>

#include <string>

#include "launcher/proto/frame.h"

using dtrain::proto::encode_frame;
using dtrain::proto::FrameDecoder;
using dtrain::proto::kMaxFrameBytes;
using nlohmann::json;

namespace {

std::string length_prefix(uint32_t length) {
  std::string prefix(4, '\0');
  prefix[0] = static_cast<char>(length >> 24);
  prefix[1] = static_cast<char>(length >> 16);
  prefix[2] = static_cast<char>(length >> 8);
  prefix[3] = static_cast<char>(length);
  return prefix;
}

std::string raw_frame(const std::string& body) {
  return length_prefix(static_cast<uint32_t>(body.size())) + body;
}

}  // namespace

TEST_CASE("a frame round-trips as a big-endian length and then the JSON") {
  json message = {{"type", "spawn"}, {"gen", 3}, {"argv", {"a b", "\"q\"", "$(x)\n"}}};
  std::string frame = encode_frame(message);
  std::string body = message.dump();
  REQUIRE(frame.size() == 4 + body.size());
  CHECK(frame.substr(0, 4) == length_prefix(static_cast<uint32_t>(body.size())));

  FrameDecoder decoder;
  decoder.feed(frame);
  auto decoded = decoder.next();
  REQUIRE(decoded.ok());
  REQUIRE(decoded->has_value());
  CHECK(**decoded == message);
  auto after = decoder.next();
  REQUIRE(after.ok());
  CHECK_FALSE(after->has_value());
  CHECK(decoder.buffered_bytes() == 0);
}

TEST_CASE("invalid UTF-8 from a worker's output is replaced rather than thrown") {
  json message = {{"type", "log"}, {"line", std::string("bad \xff\xfe byte")}};
  std::string frame = encode_frame(message);
  FrameDecoder decoder;
  decoder.feed(frame);
  auto decoded = decoder.next();
  REQUIRE(decoded.ok());
  REQUIRE(decoded->has_value());
  CHECK((**decoded)["line"].get<std::string>().find("bad ") == 0);
}

TEST_CASE("bytes delivered one at a time decode to the same message") {
  json message = {{"type", "log"}, {"rank", 7}, {"line", "hello world"}};
  std::string frame = encode_frame(message);
  FrameDecoder decoder;
  for (size_t i = 0; i < frame.size(); ++i) {
    decoder.feed(std::string_view(&frame[i], 1));
    auto decoded = decoder.next();
    REQUIRE(decoded.ok());
    if (i + 1 < frame.size()) {
      CHECK_FALSE(decoded->has_value());
    } else {
      REQUIRE(decoded->has_value());
      CHECK(**decoded == message);
    }
  }
}

TEST_CASE("several frames in one chunk come out in order") {
  std::string chunk;
  for (int i = 0; i < 100; ++i) chunk += encode_frame({{"type", "beat"}, {"n", i}});
  FrameDecoder decoder;
  decoder.feed(chunk);
  for (int i = 0; i < 100; ++i) {
    auto decoded = decoder.next();
    REQUIRE(decoded.ok());
    REQUIRE(decoded->has_value());
    CHECK((**decoded)["n"] == i);
  }
  auto after = decoder.next();
  REQUIRE(after.ok());
  CHECK_FALSE(after->has_value());
}

TEST_CASE("a truncated frame waits for the rest") {
  std::string frame = encode_frame({{"type", "ping"}, {"id", 1}});
  FrameDecoder decoder;
  decoder.feed(frame.substr(0, 2));
  auto first = decoder.next();
  REQUIRE(first.ok());
  CHECK_FALSE(first->has_value());
  decoder.feed(frame.substr(2, frame.size() - 3));
  auto second = decoder.next();
  REQUIRE(second.ok());
  CHECK_FALSE(second->has_value());
  CHECK(decoder.buffered_bytes() == frame.size() - 1);
  decoder.feed(frame.substr(frame.size() - 1));
  auto third = decoder.next();
  REQUIRE(third.ok());
  REQUIRE(third->has_value());
  CHECK((**third)["id"] == 1);
}

TEST_CASE("an oversized length is refused before its body arrives and the decoder stays failed") {
  FrameDecoder decoder;
  decoder.feed(length_prefix(9'000'000));
  auto decoded = decoder.next();
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.error().message == "frame of 9000000 bytes exceeds the 8 MiB limit");
  CHECK(decoder.failed());
  decoder.feed(encode_frame({{"type", "ping"}}));
  auto again = decoder.next();
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message == decoded.error().message);
}

TEST_CASE("a frame of exactly the limit is accepted") {
  std::string filler(kMaxFrameBytes - 30, 'x');
  json message = {{"type", "log"}, {"line", filler}};
  std::string body = message.dump();
  body.append(kMaxFrameBytes - body.size(), ' ');  // JSON allows trailing whitespace
  FrameDecoder decoder;
  decoder.feed(raw_frame(body));
  auto decoded = decoder.next();
  REQUIRE(decoded.ok());
  REQUIRE(decoded->has_value());
  CHECK((**decoded)["line"].get<std::string>().size() == filler.size());
}

TEST_CASE("garbage and non-objects and a missing or non-string type are errors that say what was wrong") {
  struct Case {
    std::string body;
    std::string expected_start;
  };
  const Case cases[] = {
      {"{not json", "malformed JSON in frame: '{not json'"},
      {"", "malformed JSON in frame"},
      {"[1,2]", "frame is a JSON array, not an object"},
      {"\"type\"", "frame is a JSON string, not an object"},
      {"{\"gen\":1}", "frame has no \"type\" field"},
      {"{\"type\":5}", "frame's \"type\" is a number, not a string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body);
    FrameDecoder decoder;
    decoder.feed(raw_frame(c.body));
    auto decoded = decoder.next();
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.error().message.rfind(c.expected_start, 0) == 0);
    // One bad body loses no framing: the decoder goes on with the next frame.
    CHECK_FALSE(decoder.failed());
    decoder.feed(encode_frame({{"type", "ping"}, {"id", 9}}));
    auto after = decoder.next();
    REQUIRE(after.ok());
    REQUIRE(after->has_value());
    CHECK((**after)["id"] == 9);
  }
}

TEST_CASE("a good frame before a bad one is still delivered") {
  FrameDecoder decoder;
  decoder.feed(encode_frame({{"type", "ping"}, {"id", 4}}) + raw_frame("garbage"));
  auto first = decoder.next();
  REQUIRE(first.ok());
  REQUIRE(first->has_value());
  CHECK((**first)["id"] == 4);
  CHECK_FALSE(decoder.next().ok());
}
