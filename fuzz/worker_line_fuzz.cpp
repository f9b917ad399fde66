// Fuzz target: one line a worker writes on its agent socket (worker/contract/wire.h), parsed by
// proto::parse_worker_line. Input: the line's bytes (without its '\n').
// Invariants: the parser returns (never throws); an error is printable text; an accepted message
// has a canonical JSON that parses back to itself (the agent forwards exactly that, and the
// supervisor parses it again); dtrain::printable()'s output is bounded and printable;
// is_standby_hello and request_id_of return too.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "fuzz/message_invariants.h"
#include "launcher/base/strings.h"
#include "launcher/proto/worker_messages.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line = as_text(data, size);

  std::string excerpt = printable(line, 80);
  check_printable(excerpt, "printable() escapes control bytes");
  check(excerpt.size() <= 80 * 4 + 3, "printable() shows at most 80 input bytes", std::to_string(excerpt.size()));
  check(printable(excerpt) == excerpt, "printable() output is printable as it is", excerpt);

  auto parsed = proto::parse_worker_line(line);
  // What the agent reads of a line that is no message (a standby's hello, a refused request's
  // id) never throws either.
  (void)proto::is_standby_hello(line);
  (void)proto::request_id_of(line);
  if (!parsed) {
    check(!parsed.error().message.empty(), "an error says what is wrong");
    check_printable(parsed.error().message, "an error about a worker line is printable");
    return 0;
  }
  check_worker_message(*parsed);
  return 0;
}
