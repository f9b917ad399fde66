#pragma once
// `dtrain hosts`' software-stack check (spec consistency): the facts script's part that asks each
// host's dtrain for its stack fingerprint (`dtrain agent --stack-probe`, the agent's own probe),
// and the comparison of what came back, the same one the supervisor makes before the first
// generation (launcher/events/stack_comparison.h), so the preflight and the run agree.

#include <optional>
#include <string>
#include <vector>

#include "launcher/events/stack_events.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::cli {

/// Shell lines that set $s to a dtrain of this version on the host, when $s is not set yet: $x
/// (this binary, for a local host), ssh.remote_dtrain ($p) when it is this version, or the copy
/// a submit cached ($c). Shared by the stack and the health parts (hosts_health.h).
std::string this_dtrain_script_lines();

/// Shell lines for the facts script (after it set $v, $p and $c; a local host's check sets $x
/// to this binary): one "stack <json>" line, or "stack_none <why>" when the host has no dtrain
/// of this version yet. "" with consistency: off.
std::string stack_script_part(const spec::JobSpec& job);

/// One host's part of the check.
struct StackFinding {
  std::string host;
  bool spare = false;
  std::string output;  ///< the facts script's stdout ("" when the host could not be reached)
  // results
  std::optional<events::HostStack> stack;
  std::string verdict = "-";  ///< "same", "DIFFERS", "unknown" (no fingerprint), "-" (not checked)
  std::vector<std::string> problems;  ///< consistency strict: the differences
  std::vector<std::string> warnings;  ///< consistency warn, and what could not be read
};

/// Reads each finding's stack and compares the hosts (spares against the hosts, as a run would
/// judge them). The comparison as stack.consistency, or nullopt when nothing was compared.
std::optional<events::StackConsistency> check_host_stacks(const spec::JobSpec& job, std::vector<StackFinding>& findings);

}  // namespace dtrain::cli
