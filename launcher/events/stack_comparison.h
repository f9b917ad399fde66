#pragma once
// The one comparison of hosts' software stacks: the supervisor's before the first generation
// (and for each spare that connects), and `dtrain hosts`' preflight, so both give the same
// verdict. Pure: host.stack events in, the differences stack.consistency records out. It lives
// with the events because both of its users may use this module and its answer is that event's
// content.
//
// The rule, per item: the value most hosts have is the majority; a host whose known value is
// another differs. When two or more values are tied for the most hosts there is no majority,
// and every host that has a known value of that item is named (nobody can say which is right).
// A value that could not be read ("unknown", "unknown (why)") and an item a host did not report
// are never a difference: they are listed as unknown, so an agent whose Python probe timed out
// does not refuse the run, but the operator sees that it could not be checked.

#include <string>
#include <string_view>
#include <vector>

#include "launcher/events/stack_events.h"

namespace dtrain::events {

/// "unknown" or "unknown (...)": the value could not be read.
bool is_unknown_stack_value(std::string_view value);

struct StackComparison {
  /// Each item that has a majority value, with it, in the order the items first appear.
  std::vector<StackItem> reference{};
  /// How many hosts have each reference value (same order as `reference`).
  std::vector<int> reference_hosts{};
  /// Items whose known values were tied for the most hosts: no majority.
  std::vector<std::string> tied{};
  /// By host (in the order given), then item.
  std::vector<StackDifference> differences{};
  /// "host: item" whose value could not be read (or that the host did not report).
  std::vector<std::string> unknown{};
};

/// StackComparison::unknown in a few words, by item: "image (every host), torch (h2)".
std::string unknown_text(const std::vector<std::string>& unknown, size_t host_count);

/// Compares the hosts' stacks (two or more; fewer gives no differences).
StackComparison compare_stacks(const std::vector<HostStack>& hosts);

/// stack.consistency for a comparison of `hosts` under `mode` ("strict" or "warn"): hosts,
/// differences, unknown, the verdict and the run's action (started; refused under strict, warned
/// under warn, when a host differs). `detail` is the caller's to write.
StackConsistency consistency_of(const StackComparison& compared, const std::string& mode,
                                const std::vector<HostStack>& hosts);

/// A host that was not compared (a spare that connected later) against the reference of a
/// comparison: each known value that differs from the reference's, and each of its items that
/// had no majority (a tie) with any known value. Unknown values are left out, as above.
std::vector<StackDifference> stack_differences(const StackComparison& compared, const HostStack& host);

}  // namespace dtrain::events
