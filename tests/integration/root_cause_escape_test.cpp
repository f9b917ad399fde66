// Printable-only root causes (issue 26, item 8): a worker whose error message and last output
// hold terminal escape sequences (an OSC title, a screen clear, colours, a C1 CSI) fails the run;
// the run's summary and `dtrain status` show them as visible \x.. text, and no ESC byte (nor a
// UTF-8 C1 control) reaches the operator's terminal.

#include <doctest/doctest.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

/// Where `text` holds a byte that a terminal would act on: ESC, BEL, or a UTF-8 C1 control
/// (U+0080..U+009F). npos when there is none.
size_t terminal_control_at(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0x1b || byte == 0x07) return i;
    if (byte == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      return i;
    }
  }
  return std::string::npos;
}

}  // namespace

TEST_CASE("a worker's error message full of escape sequences prints as visible text in the summary and in status") {
  DtrainEnv env;
  std::string script = env.dir.path + "/hostile.py";
  write_text(script,
             "import sys\n"
             "sys.stderr.write('\\x1b]0;pwned\\x07 output \\x1b[31mred\\x1b[0m \\u009b2J\\n')\n"
             "sys.stderr.flush()\n"
             "raise RuntimeError('\\x1b]0;pwned\\x07 bad batch \\x1b[2J')\n");
  // Two attempts: the summary then lists the incidents too (restarts > 0).
  std::string spec = env.write_spec("hostile.yaml",
                                    "version: 1\nname: hostile\nslots_per_host: 1\n"
                                    "worker:\n  command: [/usr/bin/python3, '" + script + "']\n"
                                    "elastic: {max_restarts: 1}\n"
                                    "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n");
  DtrainProcess run = env.run({"submit", spec});
  CHECK(run.exit_code == 1);
  std::string err = run.err();
  INFO("submit stderr:\n" << err);
  CHECK(terminal_control_at(err) == std::string::npos);
  CHECK(err.find("root cause: rank 0 (local rank 0) on host localhost") != std::string::npos);
  // The root-cause line, the traceback's last line, the last output and the incident list.
  CHECK(err.find("RuntimeError: \\x1b]0;pwned\\x07 bad batch \\x1b[2J") != std::string::npos);
  CHECK(err.find("\\x1b]0;pwned\\x07 output \\x1b[31mred\\x1b[0m \\xc2\\x9b2J") != std::string::npos);
  CHECK(err.find("incidents (2), restarts 1:") != std::string::npos);

  std::string dir = env.run_dirs().at(0);
  // The run log keeps the message exactly (JSON escapes it); only what is printed is made visible.
  auto detected = events_named(read_events(dir + "/events.jsonl"), "failure.detected");
  REQUIRE(!detected.empty());
  CHECK(detected[0].value("detail", "") == "RuntimeError: \x1b]0;pwned\x07 bad batch \x1b[2J");

  DtrainProcess status = env.run({"status", run_id_of(dir), "--events", "20"}, 30000);
  CHECK(status.exit_code == 0);
  INFO("dtrain status:\n" << status.out());
  CHECK(terminal_control_at(status.out()) == std::string::npos);
  CHECK(status.out().find("root cause") != std::string::npos);
  CHECK(status.out().find("\\x1b]0;pwned\\x07 bad batch") != std::string::npos);
  DtrainProcess list = env.run({"status"}, 30000);
  CHECK(terminal_control_at(list.out()) == std::string::npos);
  check_nothing_left(run_id_of(dir));
}
