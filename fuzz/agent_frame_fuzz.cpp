// Fuzz target: the byte stream an agent sends the supervisor: length-prefixed frames
// (proto::FrameDecoder), each decoded object checked by proto::parse_agent_message, and a
// from_worker's inner message by parse_worker_message; each frame body also through
// proto::AgentFrameParser (the driver's parser, simdjson for beats and relay_from). Input: the stream's bytes.
// Invariants: nothing throws; the stream decodes to the same messages and errors whether it
// arrives at once or in 3-byte pieces; a decoded frame is an object with a string "type" and
// re-encodes to a frame that decodes equal; an accepted message respects the catalogue's
// ranges (an exit has exactly one of code and signal) and survives its own serialisation
// (parse(to_json(m)) == m); errors are printable text;
// AgentFrameParser gives every body the same message or error as the generic path, and its
// beat, relay_from, pong and relay_batch fast paths accept only what the generic path accepts,
// with the same fields; the stream carried by a relay (proto::RelayBatcher, in 3-byte pieces,
// its beats and pongs batched) reads on the supervisor as the same messages and errors, in the
// same order, as the stream read directly.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/message_invariants.h"
#include "launcher/proto/agent_frame_parser.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/relay_batcher.h"
#include "launcher/proto/worker_messages.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

// What next() gave, in a comparable form: the message's JSON, or "error: ..." text.
using Outcome = std::string;

// Drains `decoder` into `outcomes`; false once the decoder has failed for good.
bool drain(proto::FrameDecoder& decoder, std::vector<Outcome>& outcomes, std::vector<nlohmann::json>* messages) {
  while (true) {
    auto next = decoder.next();
    if (!next) {
      outcomes.push_back("error: " + next.error().message);
      if (decoder.failed()) return false;
      continue;
    }
    if (!next->has_value()) return true;
    const nlohmann::json& message = **next;
    outcomes.push_back(message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (messages) messages->push_back(message);
  }
}

void check_from_worker(const proto::FromWorker& from) {
  if (from.msg) {
    check_worker_message(*from.msg);
  } else {
    check_printable(from.msg.error().message, "an error about a forwarded worker message is printable");
  }
}

void check_agent_message(const proto::AgentMessage& message) {
  if (const auto* exit = std::get_if<proto::WorkerExitReport>(&message)) {
    check(exit->code.has_value() != exit->signal.has_value(), "an exit has exactly one of code and signal");
    check(exit->rank >= 0 && exit->gen >= -1, "an exit names a rank and a generation");
  }
  if (const auto* started = std::get_if<proto::WorkerStartedReport>(&message)) {
    check(started->rank >= 0 && started->pid >= 0, "a start names a rank and a pid");
  }
  if (const auto* from_worker = std::get_if<proto::FromWorker>(&message)) check_from_worker(*from_worker);
  if (const auto* hello = std::get_if<proto::AgentHello>(&message)) {
    check(!(hello->stack && hello->stack_error), "a hello's stack parsed or is an error, not both");
    if (hello->stack_error) check_printable(*hello->stack_error, "an error about a hello's stack is printable");
    if (hello->stack) check(hello->stack->files.size() <= proto::kMaxStackFiles, "a stack holds at most kMaxStackFiles");
  }
  if (const auto* beat = std::get_if<proto::AgentBeat>(&message)) {
    for (const proto::FromWorker& held : beat->worker_beats) check_from_worker(held);
  }
  if (const auto* batch = std::get_if<proto::RelayBatchReport>(&message)) {
    for (const proto::RelayedMessage& relayed : batch->messages) {
      if (const auto* beat = std::get_if<proto::AgentBeat>(&relayed.message)) check_agent_message(proto::AgentMessage(*beat));
    }
  }
}

// Whether every worker message a from_worker or a beat carries parsed, and a hello's stack: only
// such a message is what an agent sends (to_json writes no Error).
bool carries_no_error(const proto::AgentMessage& message) {
  if (const auto* from = std::get_if<proto::FromWorker>(&message)) return from->msg.ok();
  if (const auto* hello = std::get_if<proto::AgentHello>(&message)) return !hello->stack_error;
  if (const auto* beat = std::get_if<proto::AgentBeat>(&message)) {
    for (const proto::FromWorker& held : beat->worker_beats) {
      if (!held.msg) return false;
    }
  }
  if (const auto* batch = std::get_if<proto::RelayBatchReport>(&message)) {
    for (const proto::RelayedMessage& relayed : batch->messages) {
      const auto* beat = std::get_if<proto::AgentBeat>(&relayed.message);
      if (beat && !carries_no_error(proto::AgentMessage(*beat))) return false;
    }
  }
  return true;
}

// The fast path against the generic one, for one frame body.
void check_frame_parser(proto::AgentFrameParser& parser, std::string_view body) {
  Result<nlohmann::json> frame = proto::parse_frame_body(body);
  Result<proto::AgentMessage> generic = frame ? proto::parse_agent_message(*frame) : Result<proto::AgentMessage>(frame.error());
  std::string expected = describe_agent_message(generic);
  std::string shown(body.substr(0, 400));
  check(describe_agent_message(parser.parse(body)) == expected, "AgentFrameParser agrees with the generic path",
        printable(shown, 400) + "\n  generic: " + printable(expected, 400));
  if (std::optional<proto::AgentBeat> beat = parser.read_beat(body)) {
    check(describe_agent_message(proto::AgentMessage(std::move(*beat))) == expected,
          "a beat the fast path accepts is the generic path's beat", printable(shown, 400));
  }
  if (std::optional<proto::RelayFromReport> from = parser.read_relay_from(body)) {
    check(describe_agent_message(proto::AgentMessage(std::move(*from))) == expected,
          "a relay_from the fast path accepts is the generic path's", printable(shown, 400));
  }
  if (std::optional<proto::Pong> pong = parser.read_pong(body)) {
    check(describe_agent_message(proto::AgentMessage(*pong)) == expected, "a pong the fast path accepts is the generic path's",
          printable(shown, 400));
  }
  if (std::optional<proto::RelayBatchReport> batch = parser.read_relay_batch(body)) {
    check(describe_agent_message(proto::AgentMessage(std::move(*batch))) == expected,
          "a relay_batch the fast path accepts is the generic path's", printable(shown, 400));
  }
}

// Every message and error in `stream`, frame by frame, as the driver reads them; a lost framing
// ends it with its error, and the last entry counts the bytes after the last whole frame.
std::vector<Outcome> read_directly(proto::AgentFrameParser& parser, std::string_view stream) {
  std::vector<Outcome> outcomes;
  proto::FrameDecoder decoder;
  decoder.feed(stream);
  while (true) {
    auto body = decoder.next_body();
    if (!body) {
      outcomes.push_back("lost: " + body.error().message);
      break;
    }
    if (!body->has_value()) break;
    outcomes.push_back(describe_agent_message(parser.parse(**body)));
  }
  outcomes.push_back("rest: " + std::to_string(decoder.failed() ? 0 : decoder.buffered_bytes()));
  return outcomes;
}

// The same stream carried by a relay: read on the supervisor from what the batcher sent.
void check_relayed(proto::AgentFrameParser& parser, std::string_view stream) {
  std::vector<proto::AgentMessage> sent;
  proto::RelayBatcher batcher([&](proto::AgentMessage message) { sent.push_back(std::move(message)); });
  int64_t now = 0;
  for (size_t at = 0; at < stream.size(); at += 3) {
    batcher.received("h", stream.substr(at, 3), "", now);
    now += 7;
    batcher.flush_due(now);
  }
  batcher.forget("h");
  std::vector<Outcome> outcomes;
  proto::FrameDecoder raw;
  bool lost = false;
  for (const proto::AgentMessage& message : sent) {
    if (const auto* from = std::get_if<proto::RelayFromReport>(&message)) {
      check(from->host == "h", "a relay_from names the host it carries");
      raw.feed(from->data);
      while (!lost) {
        auto body = raw.next_body();
        if (!body) {
          outcomes.push_back("lost: " + body.error().message);
          lost = true;
          break;
        }
        if (!body->has_value()) break;
        outcomes.push_back(describe_agent_message(parser.parse(**body)));
      }
    } else if (const auto* batch = std::get_if<proto::RelayBatchReport>(&message)) {
      check(!lost, "nothing is batched after the framing broke");
      check(proto::to_json(message).dump().size() < proto::kMaxFrameBytes, "a batch fits in a frame");
      for (const proto::RelayedMessage& relayed : batch->messages) {
        check(relayed.host == "h", "a batch names the host it carries");
        outcomes.push_back(describe_agent_message(
            std::visit([](const auto& typed) { return Result<proto::AgentMessage>(proto::AgentMessage(typed)); }, relayed.message)));
      }
    } else {
      check(false, "a relay sends only relay_from and relay_batch for a host's stream");
    }
  }
  outcomes.push_back("rest: " + std::to_string(raw.failed() ? 0 : raw.buffered_bytes()));
  std::vector<Outcome> direct = read_directly(parser, stream);
  check(outcomes == direct, "a relayed stream reads as the same messages, in the same order, as a direct one",
        printable(std::string(stream.substr(0, 400)), 400));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view stream = as_text(data, size);

  proto::FrameDecoder whole;
  whole.feed(stream);
  std::vector<Outcome> whole_outcomes;
  std::vector<nlohmann::json> messages;
  drain(whole, whole_outcomes, &messages);

  proto::FrameDecoder pieces;
  std::vector<Outcome> piece_outcomes;
  for (size_t at = 0; at < stream.size(); at += 3) {
    pieces.feed(stream.substr(at, 3));
    if (!drain(pieces, piece_outcomes, nullptr)) break;
  }
  check(piece_outcomes == whole_outcomes, "a stream decodes the same whole or in pieces");

  static proto::AgentFrameParser parser;  // one for every input, as the driver keeps one: buffers reused
  proto::FrameDecoder bodies;
  bodies.feed(stream);
  while (true) {
    auto body = bodies.next_body();
    if (!body || !body->has_value()) break;
    check_frame_parser(parser, **body);
  }

  check_relayed(parser, stream);

  for (const nlohmann::json& message : messages) {
    check(message.is_object() && message.contains("type") && message["type"].is_string(),
          "a decoded frame is an object with a string type", message.dump());
    proto::FrameDecoder again;
    again.feed(proto::encode_frame(message));
    auto decoded = again.next();
    check(decoded && decoded->has_value() && **decoded == message, "a decoded frame re-encodes to itself",
          message.dump());

    auto parsed = proto::parse_agent_message(message);
    if (parsed) {
      check_agent_message(*parsed);
      if (carries_no_error(*parsed)) {
        auto again = proto::parse_agent_message(proto::to_json(*parsed));
        check(again && *again == *parsed, "parse(to_json(m)) == m for an accepted agent message", message.dump());
      }
    } else {
      check(!parsed.error().message.empty(), "an error says what is wrong");
      check_printable(parsed.error().message, "an error about an agent frame is printable");
    }
  }
  return 0;
}
