#pragma once
// Framing of the agent ⇄ supervisor stream: each message is a 4-byte big-endian length followed
// by that many bytes of UTF-8 JSON, an object with a string "type" (messages.h lists them).
// A length prefix rather than newlines so that a stuck or chatty peer can never make the other
// side buffer without bound: the size limit is checked before a byte of the body is kept.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain::proto {

/// Largest frame body either side accepts. Senders keep well under it (log lines are capped at
/// 64 KiB, worker-protocol lines and so the store's replies at 1 MiB).
inline constexpr size_t kMaxFrameBytes = 8 << 20;

/// Length prefix + compact JSON. Invalid UTF-8 in strings (worker output is arbitrary bytes) is
/// replaced with U+FFFD rather than failing. Never throws. Unchecked: a body over
/// kMaxFrameBytes is framed as it is (tests build such frames); real senders use
/// encode_frame_checked().
std::string encode_frame(const nlohmann::json& message);

/// The length prefix + `body`, a frame body its caller has serialised itself (unchecked, as
/// encode_frame()).
std::string frame_of_body(std::string_view body);

/// encode_frame(), or an Error naming the message's type, its size and kMaxFrameBytes when the
/// body is over the limit. Such a frame must not be sent: the peer's decoder would refuse it and
/// the stream would be lost (an agent fences itself, the supervisor loses the host).
Result<std::string> encode_frame_checked(const nlohmann::json& message);

/// Checks one frame body: a JSON object with a string "type". The Error (malformed JSON with a
/// printable excerpt, a non-object, a missing or non-string "type") is the text next() gives.
Result<nlohmann::json> parse_frame_body(std::string_view body);

/// Turns a byte stream back into messages. Feed bytes as they arrive, then call next() until it
/// returns nullopt (need more bytes). A bad length (over the limit) is an Error after which the
/// decoder stays failed and every next() returns the same Error: a stream that lost its framing
/// cannot be resynchronised. A well-framed body that is not a JSON object with a string "type"
/// is an Error for that one message only (failed() stays false; the next frame decodes).
/// Messages do not name the peer; callers add the host.
class FrameDecoder {
 public:
  void feed(std::string_view bytes);

  /// The next complete message, nullopt when the buffered bytes hold no complete frame, or an
  /// Error for an oversized length (fatal: failed() turns true), malformed JSON, a non-object,
  /// or a missing/non-string "type" (that frame is skipped).
  Result<std::optional<nlohmann::json>> next();

  /// The next complete frame's body, unparsed, for a caller that parses it itself
  /// (AgentFrameParser): nullopt when no complete frame is buffered, an Error only for an
  /// oversized length (fatal, as in next()). The view stays valid until the next call to
  /// feed(), next() or next_body().
  Result<std::optional<std::string_view>> next_body();

  /// True once next() has returned a fatal Error (the framing is lost).
  bool failed() const { return failure_.has_value(); }

  /// Bytes buffered but not yet returned as a message (for "truncated frame at EOF" checks);
  /// 0 once failed().
  size_t buffered_bytes() const { return failed() ? 0 : buffer_.size() - consumed_; }

  /// The bytes after the last frame returned, handed over and forgotten (an agent that becomes
  /// a plain pipe passes them on). Once failed(): the bytes fed from the bad length on.
  std::string take_buffered();

 private:
  Error fail(std::string message);

  std::string buffer_;
  size_t consumed_ = 0;  // bytes at the front of buffer_ already decoded
  std::optional<Error> failure_;
};

}  // namespace dtrain::proto
