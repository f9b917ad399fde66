// Fuzz target: one events.jsonl line as every reader reads it: parse_event_line (the checked
// JSON object) and parse_logged_event (the typed Event that status, logs, resume, the report,
// the registry and drills visit). Input: the line's bytes.
// Invariants: neither parser throws; an accepted line has string "ts" and "ev" equal to the
// record's, and every field readers look up has the type they expect; the event written out
// again (format_event_line) reads back equal; a line read as a typed Event is read as one exactly
// when it passes parse_event_line and its struct's from_json, has the line's name, and its
// to_json reads back as the same Event (from_json(to_json(e)) == e).

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/event_log.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

// The fields readers look up by name and the types parse_event_line promises for them.
constexpr const char* kIntegerFields[] = {"gen", "rank", "local_rank", "pid", "step", "code", "exit_code",
                                          "world_size", "restarts", "steps_lost"};
constexpr const char* kStringFields[] = {"host", "state", "kind", "detail", "signal", "log",
                                         "reason", "fault", "verdict", "mode", "message"};

void check_typed(std::string_view text, const Result<EventRecord>& parsed) {
  Result<LoggedEvent> typed = parse_logged_event(text);
  if (!parsed) {
    check(!typed.ok(), "a line parse_event_line refuses is no typed event either");
    return;
  }
  if (!typed) {
    check(!typed.error().message.empty(), "a typed error says what is wrong");
    check(events::parse_event(parsed->event).ok() == false, "the typed error is from_json's");
    return;
  }
  check(typed->ts == parsed->ts, "the typed event keeps ts");
  check(events::event_name(typed->event) == parsed->name, "the typed event has the line's name", parsed->name);
  nlohmann::json written = events::to_json(typed->event);
  Result<events::Event> again = events::parse_event(written);
  check(again.ok(), "a typed event written out reads back", json_compact(written));
  check(*again == typed->event, "a typed event written out reads back equal", json_compact(written));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);
  auto parsed = parse_event_line(text);
  check_typed(text, parsed);
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
