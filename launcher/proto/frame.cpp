#include "launcher/proto/frame.h"

#include <cstdint>

namespace dtrain::proto {

std::string encode_frame(const nlohmann::json& message) {
  std::string body = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
  buffer_.clear();
  consumed_ = 0;
  return *failure_;
}

Result<std::optional<nlohmann::json>> FrameDecoder::next() {
  if (failure_) return *failure_;
  size_t available = buffer_.size() - consumed_;
  if (available < 4) return std::optional<nlohmann::json>();
  const auto* head = reinterpret_cast<const unsigned char*>(buffer_.data() + consumed_);
  uint64_t length = (uint64_t{head[0]} << 24) | (uint64_t{head[1]} << 16) |
                    (uint64_t{head[2]} << 8) | uint64_t{head[3]};
  if (length > kMaxFrameBytes) {
    return fail("frame of " + std::to_string(length) + " bytes exceeds the " +
                std::to_string(kMaxFrameBytes >> 20) + " MiB limit");
  }
  if (available - 4 < length) return std::optional<nlohmann::json>();
  std::string_view body(buffer_.data() + consumed_ + 4, static_cast<size_t>(length));
  nlohmann::json message = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  consumed_ += 4 + static_cast<size_t>(length);
  // A bad body inside a well-formed frame is one bad message: the length prefix still says
  // where the next frame starts, so the stream goes on (the caller counts such errors).
  std::optional<std::string> problem;
  if (message.is_discarded()) {
    std::string excerpt(body.substr(0, 60));
    for (char& c : excerpt) {
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    problem = "malformed JSON in frame: '" + excerpt + (body.size() > 60 ? "...'" : "'");
  } else if (!message.is_object()) {
    problem = std::string("frame is a JSON ") + message.type_name() + ", not an object";
  } else if (auto type = message.find("type"); type == message.end()) {
    problem = "frame has no \"type\" field";
  } else if (!type->is_string()) {
    problem = std::string("frame's \"type\" is a ") + type->type_name() + ", not a string";
  }
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  if (problem) return Error::infra(*problem);
  return std::optional<nlohmann::json>(std::move(message));
}

}  // namespace dtrain::proto
