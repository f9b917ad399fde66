// Fuzz target: plan-<gen>.json as `dtrain status`, resume and the report read it back
// (parse_plan_text, launcher/runlog/plan_record.h), both ways: keeping the JSON (nlohmann's DOM)
// and without it (simdjson for a plan as dtrain writes it, nlohmann for anything else). Input: a
// plan file's bytes.
// Invariants: nothing throws; an error says what is wrong in printable text; both ways give the
// same record or the same error; every host of an accepted plan has a name, and each of its
// ranks is described.

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/message_invariants.h"
#include "fuzz/plan_invariants.h"
#include "launcher/runlog/plan_record.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(as_text(data, size));
  Result<PlanRecord> kept = parse_plan_text(text, 2, "plan-2.json", PlanJson::keep);
  Result<PlanRecord> dropped = parse_plan_text(text, 2, "plan-2.json", PlanJson::drop);
  check(describe_plan_record(kept) == describe_plan_record(dropped), "a plan reads the same with and without its JSON",
        printable(describe_plan_record(kept), 300) + "\n  without: " + printable(describe_plan_record(dropped), 300));
  if (!kept) {
    check(!kept.error().message.empty(), "an error says what is wrong");
    check_printable(kept.error().message, "an error about a plan file is printable");
    return 0;
  }
  check(kept->generation == 2 && dropped->generation == 2, "the record is the generation asked for");
  for (const PlanRecord::Host& host : kept->hosts) check(!host.name.empty(), "every host has a name");
  return 0;
}
