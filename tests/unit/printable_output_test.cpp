// What dtrain prints of text it did not write (a worker's error message, an event field, a drill
// verdict's detail) is printable(): control bytes and the UTF-8 C1 controls become visible \x..,
// so no escape sequence reaches an operator's terminal, while ordinary UTF-8 stays as it is.

#include <doctest/doctest.h>

#include <string>

#include "launcher/base/strings.h"
#include "launcher/drill/drill_report.h"

using dtrain::printable;
using namespace dtrain::drill;

namespace {

bool has_terminal_control(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 && byte != '\n') return true;
    if (byte == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("printable: C0 controls, DEL and the UTF-8 C1 controls are escaped, other UTF-8 is kept") {
  CHECK(printable("\x1b]0;pwned\x07 title") == "\\x1b]0;pwned\\x07 title");
  CHECK(printable(std::string("a\0b\nc\x7f", 6)) == "a\\x00b\\x0ac\\x7f");
  CHECK(printable("csi \xc2\x9b" "2J osc \xc2\x9d") == "csi \\xc2\\x9b2J osc \\xc2\\x9d");
  CHECK(printable("caf\xc3\xa9 \xc2\xa0nbsp \xe2\x82\xac") == "caf\xc3\xa9 \xc2\xa0nbsp \xe2\x82\xac");
  CHECK(printable("\xc2") == "\xc2");  // a cut sequence at the end is not a control
  CHECK(printable("abcdef", 3) == "abc...");
}

TEST_CASE("a drill verdict shows what came from the run as visible text") {
  DrillReport report;
  report.drill_id = "drill-escape";
  report.mode = "spec";
  report.final_state = "failed\x1b]0;pwned\x07";
  FaultVerdict fault;
  fault.detected_kind = "worker.exit\x1b[2J";
  fault.final_state = "failed\x1b[31m";
  fault.checks.push_back({"recovered", false, "RuntimeError: \x1b]0;pwned\x07 bad batch"});
  report.faults.push_back(fault);
  std::string text = format_report(report);
  INFO(text);
  CHECK_FALSE(has_terminal_control(text));
  CHECK(text.find("RuntimeError: \\x1b]0;pwned\\x07 bad batch") != std::string::npos);
  CHECK(text.find("job: failed\\x1b]0;pwned\\x07") != std::string::npos);

  DrillReport broken;
  broken.error = "the run ended: \x1b]0;pwned\x07";
  CHECK_FALSE(has_terminal_control(format_report(broken)));
}
