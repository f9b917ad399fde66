// Fuzz target: state.json as `dtrain status`, `logs`, `stop`, `resume`, drills, the report and the
// registry read it (RunSnapshot::from_json, launcher/runlog/run_snapshot.h), after the JSON parse
// read_state_file does. Input: a state.json file's bytes.
// Invariants: the reader never throws; an error says what is wrong in printable text; an accepted
// snapshot written out (to_json) reads back equal, and the text the state writer writes (text(),
// whose ranks are written without nlohmann) is that same JSON and reads back equal too. The plain
// path on simdjson (read_plain_state, what read_state_file tries first) reads nothing the generic
// path refuses, and what it reads is what the generic path reads.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "fuzz/message_invariants.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/run_snapshot.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<RunSnapshot> plain = read_plain_state(as_text(data, size));
  nlohmann::json state = nlohmann::json::parse(as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded()) {  // read_state_file's own error: not JSON
    check(!plain, "the plain path reads no text that is not JSON");
    return 0;
  }
  Result<RunSnapshot> snapshot = RunSnapshot::from_json(state);
  check(!plain || (snapshot && *plain == *snapshot), "the plain path reads what the generic path reads",
        snapshot ? "" : snapshot.error().message);
  if (!snapshot) {
    check(!snapshot.error().message.empty(), "an error says what is wrong");
    check_printable(snapshot.error().message, "an error about state.json is printable");
    return 0;
  }
  nlohmann::json written = snapshot->to_json();
  Result<RunSnapshot> again = RunSnapshot::from_json(written);
  check(again.ok(), "a snapshot written out reads back",
        json_compact(written) + (again ? "" : " → " + again.error().message));
  check(*again == *snapshot, "a snapshot written out reads back equal", json_compact(written));
  std::string text = snapshot->text();
  nlohmann::json from_text = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(!from_text.is_discarded(), "the state writer's text is JSON", text);
  check(from_text == written, "the state writer's text is to_json()", text);
  Result<RunSnapshot> from_file = RunSnapshot::from_json(from_text);
  check(from_file.ok() && *from_file == *snapshot, "the state writer's text reads back equal", text);
  return 0;
}
