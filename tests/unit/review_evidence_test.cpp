// What dtrain review takes from a run directory's files (launcher/review/run_evidence.h): a
// failure's sample from the tail of its rank's log (the last lines, a long file read from its
// end only, a FIFO never waited on), and a drill's summary typed whatever its JSON holds.

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <string>

#include "launcher/review/run_evidence.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::review;
using dtrain::testing::TempDir;

TEST_CASE("review sample: the last lines of a rank log, a big log read from its end, nothing from a FIFO or a missing file") {
  TempDir dir;
  std::string text;
  for (int line = 1; line <= 30; ++line) text += "line " + std::to_string(line) + "\n";
  std::vector<std::string> tail = file_tail(dir.write("3.log", text), kSampleLines);
  REQUIRE(tail.size() == kSampleLines);
  CHECK(tail.front() == "line 11");
  CHECK(tail.back() == "line 30");

  // 1 MB of output, then the traceback: only the end is read, and the cut first line is dropped.
  std::string big(1'000'000, 'x');
  big += "\nTraceback (most recent call last):\nRuntimeError: boom\n";
  tail = file_tail(dir.write("4.log", big), kSampleLines);
  REQUIRE(tail.size() == 2);
  CHECK(tail[1] == "RuntimeError: boom");

  REQUIRE(::mkfifo((dir.path + "/5.log").c_str(), 0600) == 0);
  CHECK(file_tail(dir.path + "/5.log", kSampleLines).empty());
  CHECK(file_tail(dir.path + "/missing.log", kSampleLines).empty());
}

TEST_CASE("review drill summary: typed from a drill line whatever its fields hold, never an exception") {
  nlohmann::json line = {{"drill_id", "drill-1"}, {"run_id", "r1"}, {"mode", "live"}, {"verdict", "fail"},
                         {"faults", {{{"fault", "kill-rank"}, {"target", "1"}, {"verdict", "fail"}}}},
                         {"missed", {"recover 95 s > 60 s", 7}}, {"leftover_pids", {11, 12}}, {"error", "x"}};
  DrillGrade drill = drill_grade_of(line, "2026-10-09T01:00:00.000Z");
  CHECK(drill.drill_id == "drill-1");
  CHECK(drill.faults == std::vector<std::string>{"kill-rank:1 fail"});
  CHECK(drill.missed == std::vector<std::string>{"recover 95 s > 60 s", "error: x"});  // the number is left out
  CHECK(drill.leftover_processes == 2);
  DrillGrade odd = drill_grade_of({{"drill_id", 3}, {"faults", "many"}, {"missed", {{"a", 1}}}}, "");
  CHECK(odd.drill_id.empty());
  CHECK(odd.verdict == "error");  // no verdict: the drill did not say it passed
  CHECK(odd.faults.empty());
  CHECK(drill_grade_of(nlohmann::json::array(), "").verdict == "error");
}
