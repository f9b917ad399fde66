#include "launcher/proto/frame.h"

#include <cstdint>

namespace dtrain::proto {

std::string encode_frame(const nlohmann::json& message) {
  return frame_of_body(message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string frame_of_body(std::string_view body) {
  uint32_t length = static_cast<uint32_t>(body.size());
  std::string frame;
  frame.reserve(4 + body.size());
  frame.push_back(static_cast<char>((length >> 24) & 0xff));
  frame.push_back(static_cast<char>((length >> 16) & 0xff));
  frame.push_back(static_cast<char>((length >> 8) & 0xff));
  frame.push_back(static_cast<char>(length & 0xff));
  frame += body;
  return frame;
}

Result<std::string> encode_frame_checked(const nlohmann::json& message) {
  std::string frame = encode_frame(message);
  if (frame.size() - 4 <= kMaxFrameBytes) return frame;
  auto type = message.is_object() ? message.find("type") : message.end();
  std::string name = type != message.end() && type->is_string() ? type->get<std::string>() : "untyped";
  return Error::internal("a " + name + " frame of " + std::to_string(frame.size() - 4) + " bytes is over the " +
                         std::to_string(kMaxFrameBytes) + "-byte frame limit; not sent");
}

std::string FrameDecoder::take_buffered() {
  std::string rest = buffer_.substr(consumed_);
  buffer_.clear();
  consumed_ = 0;
  return rest;
}

void FrameDecoder::feed(std::string_view bytes) {
  if (failure_) return;
  // Compact lazily so that many small frames in one chunk cost no quadratic copying.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes);
}

Error FrameDecoder::fail(std::string message) {
  failure_ = Error::infra(std::move(message));
  // The bytes from the bad length on stay for take_buffered() (a relay passes them on as they
  // are, so the supervisor sees the same break); nothing is fed or decoded any more.
  buffer_.erase(0, consumed_);
  consumed_ = 0;
  return *failure_;
}

Result<nlohmann::json> parse_frame_body(std::string_view body) {
  nlohmann::json message = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) {
    std::string excerpt(body.substr(0, 60));
    for (char& c : excerpt) {
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    return Error::infra("malformed JSON in frame: '" + excerpt + (body.size() > 60 ? "...'" : "'"));
  }
  if (!message.is_object()) {
    return Error::infra(std::string("frame is a JSON ") + message.type_name() + ", not an object");
  }
  auto type = message.find("type");
  if (type == message.end()) return Error::infra("frame has no \"type\" field");
  if (!type->is_string()) {
    return Error::infra(std::string("frame's \"type\" is a ") + type->type_name() + ", not a string");
  }
  return message;
}

Result<std::optional<std::string_view>> FrameDecoder::next_body() {
  if (failure_) return *failure_;
  // The previous body is handed out as a view into buffer_: forget it only now.
  if (consumed_ > 0 && consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  size_t available = buffer_.size() - consumed_;
  if (available < 4) return std::optional<std::string_view>();
  const auto* head = reinterpret_cast<const unsigned char*>(buffer_.data() + consumed_);
  uint64_t length = (uint64_t{head[0]} << 24) | (uint64_t{head[1]} << 16) |
                    (uint64_t{head[2]} << 8) | uint64_t{head[3]};
  if (length > kMaxFrameBytes) {
    return fail("frame of " + std::to_string(length) + " bytes exceeds the " +
                std::to_string(kMaxFrameBytes >> 20) + " MiB limit");
  }
  if (available - 4 < length) return std::optional<std::string_view>();
  std::string_view body(buffer_.data() + consumed_ + 4, static_cast<size_t>(length));
  consumed_ += 4 + static_cast<size_t>(length);
  return std::optional<std::string_view>(body);
}

Result<std::optional<nlohmann::json>> FrameDecoder::next() {
  Result<std::optional<std::string_view>> body = next_body();
  if (!body) return body.error();
  if (!body->has_value()) return std::optional<nlohmann::json>();
  // A bad body inside a well-formed frame is one bad message: the length prefix still says
  // where the next frame starts, so the stream goes on (the caller counts such errors).
  Result<nlohmann::json> message = parse_frame_body(**body);
  if (!message) return message.error();
  return std::optional<nlohmann::json>(std::move(*message));
}

}  // namespace dtrain::proto
