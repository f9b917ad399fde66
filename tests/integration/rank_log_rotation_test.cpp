// logs.max_bytes end to end: a real worker prints far more than the limit; ranks/0.log is
// rotated to 0.log.1, the two stay bounded, and `dtrain logs` (whole, --tail, --follow) shows
// the newest lines across the rotation and says that older output was rotated away.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

constexpr uint64_t kMaxBytes = 64 << 10;
// Each file may pass the limit by one write and a marker line.
constexpr uint64_t kSlack = 1024;

std::string spec_printing(const std::string& script) {
  return "version: 1\nname: rotation\nslots_per_host: 1\nworker:\n  command: [/bin/sh, -c, '" + script +
         "']\nlogs: {max_bytes: 64KiB}\nheartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\n"
         "stop_grace: 2s\n";
}

/// The worker's line number in "[rank 0] line N ..." (-1 for any other line, such as a marker).
long line_number(const std::string& line) {
  const std::string prefix = "[rank 0] line ";
  if (line.rfind(prefix, 0) != 0) return -1;
  return std::stol(line.substr(prefix.size()));
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

/// The worker lines of `dtrain logs` output, checked to be consecutive; their numbers.
std::vector<long> consecutive_numbers(const std::string& out) {
  std::vector<long> numbers;
  for (const std::string& line : split_lines(out)) {
    long number = line_number(line);
    if (number < 0) {
      CHECK_MESSAGE(line.find("=== dtrain ") != std::string::npos, "unexpected line: " << line);
      continue;
    }
    if (!numbers.empty()) CHECK_MESSAGE(number == numbers.back() + 1, "after " << numbers.back() << ": " << line);
    numbers.push_back(number);
  }
  return numbers;
}

uint64_t size_of(const std::string& path) {
  std::error_code error;
  uint64_t size = std::filesystem::file_size(path, error);
  return error ? 0 : size;
}

}  // namespace

TEST_CASE("a worker printing 16x logs.max_bytes: two bounded files, and dtrain logs shows the last lines") {
  DtrainEnv env;
  // 20,000 lines of 54 bytes: about 1 MiB.
  std::string spec = env.write_spec(
      "rotation.yaml",
      spec_printing("i=0; while [ $i -lt 20000 ]; do echo \"line $i payload-payload-payload-payload\"; i=$((i+1)); done"));
  DtrainProcess submitted = env.run({"submit", spec});
  REQUIRE(submitted.exit_code == 0);
  std::string dir = env.run_dirs().at(0);
  std::string run_id = run_id_of(dir);
  std::string log = dir + "/ranks/0.log", old = dir + "/ranks/0.log.1";

  CHECK(size_of(log) > 0);
  CHECK(size_of(log) <= kMaxBytes + kSlack);
  CHECK(size_of(old) > kMaxBytes / 2);
  CHECK(size_of(old) <= kMaxBytes + kSlack);
  CHECK_FALSE(std::filesystem::exists(dir + "/ranks/0.log.2"));
  CHECK(read_text(old).rfind("=== dtrain log rotated (", 0) == 0);  // it too followed a rotation

  // --tail within the current file.
  DtrainProcess tail = env.run({"logs", run_id, "--tail", "5"}, 30000);
  CHECK(tail.exit_code == 0);
  CHECK(consecutive_numbers(tail.out()) == std::vector<long>{19995, 19996, 19997, 19998, 19999});

  // --tail reaching into 0.log.1: as many lines as asked, consecutive, ending with the last.
  size_t in_current = split_lines(read_text(log)).size();
  size_t asked = in_current + 100;
  DtrainProcess across = env.run({"logs", run_id, "--tail", std::to_string(asked)}, 30000);
  CHECK(across.exit_code == 0);
  CHECK(split_lines(across.out()).size() == asked);
  std::vector<long> across_numbers = consecutive_numbers(across.out());
  REQUIRE(!across_numbers.empty());
  CHECK(across_numbers.back() == 19999);

  // The whole log: everything kept, from 0.log.1 on, and a word that older output is gone.
  DtrainProcess whole = env.run({"logs", run_id}, 30000);
  CHECK(whole.exit_code == 0);
  std::vector<long> numbers = consecutive_numbers(whole.out());
  REQUIRE(!numbers.empty());
  CHECK(numbers.front() > 0);
  CHECK(numbers.back() == 19999);
  CHECK(whole.err().find("rank 0: older output was rotated away (logs.max_bytes)") != std::string::npos);
  check_nothing_left(run_id);
}

TEST_CASE("dtrain logs --follow goes on across rotations: every line once, in order") {
  DtrainEnv env;
  // Six batches of 500 lines (about 40 KiB each, so one rotation at most per batch); batch b
  // starts when the test creates go-b, after --follow has shown the batch before.
  std::string spec = env.write_spec(
      "follow.yaml",
      spec_printing("i=0; b=0; while [ $b -lt 6 ]; do "
                    "while [ ! -e go-$b ]; do sleep 0.05; done; j=0; "
                    "while [ $j -lt 500 ]; do echo \"line $i payload-payload-payload-payload-payload-payload\"; "
                    "i=$((i+1)); j=$((j+1)); done; b=$((b+1)); done"));
  DtrainProcess submitted = env.start({"submit", spec});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  DtrainProcess follow = env.start({"logs", run_id, "--follow"});
  for (int batch = 0; batch < 6; ++batch) {
    write_text(env.dir.path + "/go-" + std::to_string(batch), "");
    std::string last = "[rank 0] line " + std::to_string(batch * 500 + 499) + " ";
    REQUIRE_MESSAGE(wait_until([&] { return follow.out().find(last) != std::string::npos; }, 30000),
                    "--follow did not show " << last);
  }
  CHECK(submitted.wait(60000));
  CHECK(submitted.exit_code == 0);
  CHECK(follow.wait(20000));
  CHECK(follow.exit_code == 0);
  std::vector<long> numbers = consecutive_numbers(follow.out());
  REQUIRE(!numbers.empty());
  CHECK(numbers.front() == 0);
  CHECK(numbers.back() == 2999);
  CHECK(numbers.size() == 3000);
  CHECK(size_of(dir + "/ranks/0.log") <= kMaxBytes + kSlack);
  CHECK(std::filesystem::exists(dir + "/ranks/0.log.1"));
  check_nothing_left(run_id);
}
