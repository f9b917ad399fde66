// Fuzz target: the byte stream the supervisor sends an agent: length-prefixed frames
// (proto::FrameDecoder), each decoded object checked by proto::parse_supervisor_message, the
// agent's only reader of them. Input: the stream's bytes. Invariants: nothing throws; an
// accepted message respects the catalogue's rules (a spawn has an argv and at most 64
// standbys, a kill's rank list is not empty, gen_changed moves forward) and survives its own
// serialisation (parse(to_json(m)) == m, and its frame decodes to the same message); errors
// name the message and are printable text.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "fuzz/fuzz_check.h"
#include "fuzz/message_invariants.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/supervisor_messages.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

void check_rules(const proto::SupervisorMessage& message) {
  if (const auto* spawn = std::get_if<proto::SpawnRequest>(&message)) {
    check(!spawn->argv.empty(), "a spawn has an argv");
    check(!spawn->standby || (*spawn->standby >= 0 && *spawn->standby <= proto::kMaxStandbys),
          "a spawn's standby count is within 0 to 64");
    for (const proto::SpawnWorker& worker : spawn->workers) {
      check(worker.rank >= 0 && worker.local_rank >= 0, "a spawned worker has a rank and a local rank");
    }
  }
  if (const auto* kill = std::get_if<proto::KillRequest>(&message)) {
    check(kill->gen >= -1, "a kill names a generation or -1");
    check(!kill->ranks || !kill->ranks->empty(), "a kill's rank list is absent or not empty");
  }
  if (const auto* change = std::get_if<proto::GenChangedRequest>(&message)) {
    check(change->to > change->from, "gen_changed moves to a later generation");
  }
  if (const auto* to_worker = std::get_if<proto::ToWorkerRequest>(&message)) {
    check(to_worker->msg.is_object(), "a to_worker carries an object");
  }
}

void check_round_trip(const proto::SupervisorMessage& message) {
  nlohmann::json frame = proto::to_json(message);
  std::string shown = frame.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 400);
  check(frame.is_object() && frame.value("type", "") == proto::type_of(message), "the frame carries the type", shown);
  auto again = proto::parse_supervisor_message(frame);
  check(again.ok(), "to_json of an accepted message parses again",
        shown + (again ? "" : " → " + again.error().message));
  check(*again == message, "parse(to_json(m)) == m", shown);
  proto::FrameDecoder decoder;
  decoder.feed(proto::encode_frame(frame));
  auto decoded = decoder.next();
  check(decoded && decoded->has_value(), "the encoded frame decodes", shown);
  auto reparsed = proto::parse_supervisor_message(**decoded);
  check(reparsed && *reparsed == message, "the encoded frame parses to the same message", shown);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  proto::FrameDecoder decoder;
  decoder.feed(as_text(data, size));
  while (true) {
    auto next = decoder.next();
    if (!next) {
      if (decoder.failed()) break;
      continue;
    }
    if (!next->has_value()) break;
    auto parsed = proto::parse_supervisor_message(**next);
    if (parsed) {
      check_rules(*parsed);
      check_round_trip(*parsed);
    } else {
      check(!parsed.error().message.empty(), "an error says what is wrong");
      check_printable(parsed.error().message, "an error about a supervisor frame is printable");
    }
  }
  return 0;
}
