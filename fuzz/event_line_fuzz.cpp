// Fuzz target: one events.jsonl line as dtrain status, logs, resume and drill read it
// (parse_event_line). Input: the line's bytes.
// Invariants: the parser returns (never throws); an accepted line has string "ts" and "ev" equal
// to the record's, and every field readers look up has the type they expect, so a reader's
// value() cannot throw; the event written out again (format_event_line) reads back equal.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "launcher/runlog/event_log.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

// The fields readers look up by name and the types parse_event_line promises for them.
constexpr const char* kIntegerFields[] = {"gen", "rank", "local_rank", "pid", "step", "code", "exit_code",
                                          "world_size", "restarts", "steps_lost"};
constexpr const char* kStringFields[] = {"host", "state", "kind", "detail", "signal", "log",
                                         "reason", "fault", "verdict", "mode", "message"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = parse_event_line(as_text(data, size));
  if (!parsed) {
    check(!parsed.error().message.empty(), "an error says what is wrong");
    return 0;
  }
  const nlohmann::json& event = parsed->event;
  check(event.is_object(), "an event is an object");
  check(event.contains("ts") && event["ts"].is_string() && event["ts"] == parsed->ts, "ts is the record's");
  check(event.contains("ev") && event["ev"].is_string() && event["ev"] == parsed->name, "ev is the record's");
  for (const char* field : kIntegerFields) {
    if (event.contains(field)) check(event[field].is_number_integer(), "an integer field holds an integer", field);
  }
  for (const char* field : kStringFields) {
    if (event.contains(field)) check(event[field].is_string(), "a string field holds a string", field);
  }
  if (event.contains("seconds")) check(event["seconds"].is_number(), "seconds is a number");

  std::string line = format_event_line(event, 1'764'633'600'000);
  auto again = parse_event_line(line);
  check(again.ok(), "an event written out reads back", line + (again ? "" : " → " + again.error().message));
  nlohmann::json expected = event, got = again->event;
  expected.erase("ts");
  got.erase("ts");
  check(got == expected && again->name == parsed->name, "an event written out reads back equal", line);
  return 0;
}
