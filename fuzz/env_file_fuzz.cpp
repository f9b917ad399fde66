// Fuzz target: the spec's env_file ("KEY=VALUE" lines, '#' comments, optional "export ").
// Input: the file's bytes.
// Invariants: every entry has a valid variable name and a value without a line break; every
// problem names a line inside the file; the entries written back as NAME=VALUE lines read back
// equal and without problems.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "launcher/spec/hostlist.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);
  const int line_count = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;

  std::vector<spec::LineProblem> problems;
  auto entries = spec::read_env_file(text, problems);
  for (const spec::LineProblem& problem : problems) {
    check(problem.line >= 1 && problem.line <= line_count, "a problem's line is in the file",
          std::to_string(problem.line));
    check(problem.column >= 1, "a problem has a column", problem.message);
  }
  std::string written;
  for (const auto& [name, value] : entries) {
    check(spec::is_env_name(name), "an entry's name is a variable name", name);
    check(value.find('\n') == std::string::npos, "a value holds no newline", value);
    written += name + "=" + value + "\n";
  }
  std::vector<spec::LineProblem> again_problems;
  auto again = spec::read_env_file(written, again_problems);
  check(again_problems.empty(), "entries written back read back without problems",
        written + (again_problems.empty() ? "" : " → " + again_problems[0].message));
  check(again == entries, "entries written back read back equal", written);
  return 0;
}
