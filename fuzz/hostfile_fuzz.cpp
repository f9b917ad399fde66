// Fuzz target: DeepSpeed / Open MPI hostfiles ("worker-1 slots=4", '#' comments, CRLF).
// Input: the hostfile's bytes.
// Invariants: parse_hostfile succeeds exactly when read_hostfile reports no problem and finds a
// host; every problem names a line and column inside the file; every host has the line it came
// from, in order; the accepted hosts, written back one per line, read back equal.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "fuzz/host_invariants.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);
  const int line_count = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;

  std::vector<spec::LineProblem> problems;
  std::vector<int> lines;
  std::vector<spec::HostEntry> hosts = spec::read_hostfile(text, problems, &lines);
  check(lines.size() == hosts.size(), "every host has its line");
  check(std::is_sorted(lines.begin(), lines.end()), "hosts come in file order");
  for (int line : lines) check(line >= 1 && line <= line_count, "a host's line is in the file", std::to_string(line));
  for (const spec::LineProblem& problem : problems) {
    check(problem.line >= 1 && problem.line <= line_count, "a problem's line is in the file",
          std::to_string(problem.line));
    check(problem.column >= 1, "a problem has a column", problem.message);
    check(!problem.message.empty(), "a problem says what is wrong");
  }
  for (const spec::HostEntry& host : hosts) check_host_entry(host);

  auto parsed = spec::parse_hostfile(text, "hostfile");
  check(parsed.ok() == (problems.empty() && !hosts.empty()),
        "parse_hostfile fails exactly when read_hostfile reports a problem or finds no host");
  if (!parsed) {
    check(parsed.error().message.rfind("hostfile", 0) == 0, "an error starts with the file's name",
          parsed.error().message);
    return 0;
  }
  check(*parsed == hosts, "parse_hostfile returns what read_hostfile read");
  std::string written;
  for (const spec::HostEntry& host : hosts) written += to_hostfile_line(host) + "\n";
  auto again = spec::parse_hostfile(written, "hostfile");
  check(again && *again == hosts, "the hosts written back read back equal",
        written + (again ? "" : " → " + again.error().message));
  return 0;
}
