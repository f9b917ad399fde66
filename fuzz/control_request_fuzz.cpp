// Fuzz target: the control socket's two parsers (launcher/runlog/control_protocol.h): a request
// line as the supervisor reads it from any local client, and a reply line as `dtrain stop` and
// `dtrain status` read it back. Input: one line's bytes, given to both.
// Invariants: neither parser throws; an error says what is wrong in printable text; an accepted
// request or reply written back with to_line() parses to the same value.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "fuzz/message_invariants.h"
#include "launcher/runlog/control_protocol.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line = as_text(data, size);

  auto request = parse_control_request(line);
  if (request) {
    std::string written = to_line(*request);
    auto again = parse_control_request(written);
    check(again && *again == *request, "a request written back parses to the same request",
          written + (again ? "" : " → " + again.error().message));
  } else {
    check(!request.error().message.empty(), "an error says what is wrong");
    check_printable(request.error().message, "an error about a control request is printable");
  }

  auto reply = parse_control_reply(line);
  if (reply) {
    std::string written = to_line(*reply);
    auto again = parse_control_reply(written);
    check(again.ok(), "a reply written back parses again", written + (again ? "" : " → " + again.error().message));
    check(again->ok == reply->ok && again->state == reply->state && again->generation == reply->generation &&
              again->message == reply->message,
          "a reply written back parses to the same reply", written);
  } else {
    check(!reply.error().message.empty(), "an error says what is wrong");
    check_printable(reply.error().message, "an error about a control reply is printable");
  }
  return 0;
}
