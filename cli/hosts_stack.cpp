#include "cli/hosts_stack.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/events/stack_comparison.h"
#include "launcher/proto/stack_fingerprint.h"
#include "launcher/run/worker_env.h"

namespace dtrain::cli {

namespace {

/// The "key value" line of the facts script's output, or "".
std::string line_value(const std::string& output, const std::string& key) {
  for (const std::string& line : split(output, '\n')) {
    if (starts_with(line, key + " ")) return line.substr(key.size() + 1);
  }
  return "";
}

/// The host's stack from its output, or the reason there is none.
std::optional<events::HostStack> read_stack(const StackFinding& finding, std::string& why) {
  std::string text = line_value(finding.output, "stack");
  if (text.empty()) {
    why = line_value(finding.output, "stack_none");
    if (why.empty()) why = "its dtrain printed no stack fingerprint";
    return std::nullopt;
  }
  Result<proto::StackFingerprint> fingerprint = proto::parse_stack_fingerprint(nlohmann::json::parse(text, nullptr, false));
  if (!fingerprint) {
    why = "its stack fingerprint could not be read: " + fingerprint.error().message;
    return std::nullopt;
  }
  events::HostStack stack{finding.host, {}, fingerprint->ms, fingerprint->notes};
  for (auto& [item, value] : proto::stack_items(*fingerprint)) stack.items.push_back({item, value});
  return stack;
}

std::string describe(const events::StackDifference& difference) {
  return difference.host + ": " + difference.item + " is " + difference.value + " there, " +
         (difference.majority.empty() ? std::string("and the hosts disagree (no majority)")
                                      : difference.majority + " on " + std::to_string(difference.majority_hosts) +
                                            " other host(s)");
}

}  // namespace

std::string this_dtrain_script_lines() {
  std::string wanted = std::string("dtrain ") + kVersion;
  return "s=${s:-${x:-}}\n"
         "if [ -z \"$s\" ] && [ -n \"$p\" ] && [ -x \"$p\" ] && [ \"$(\"$p\" --version 2>/dev/null | head -n 1)\" = " +
         shell_quote(wanted) + " ]; then s=$p; fi\n"
         "if [ -z \"$s\" ] && [ -x \"$c\" ]; then s=$c; fi\n";
}

std::string stack_script_part(const spec::JobSpec& job) {
  std::optional<proto::StackProbeRequest> request = run::stack_probe_request(job);
  if (!request) return "";
  std::string wanted = std::string("dtrain ") + kVersion;
  return "q=" + shell_quote(json_compact(proto::to_json(*request))) + "\n" + this_dtrain_script_lines() +
         "if [ -n \"$s\" ]; then echo \"stack $(\"$s\" agent --stack-probe \"$q\" 2>/dev/null | head -c 65536 | tr -d '\\n')\"; "
         "else echo \"stack_none no " + wanted + " there yet (it is copied at submit): not checked\"; fi\n";
}

std::optional<events::StackConsistency> check_host_stacks(const spec::JobSpec& job, std::vector<StackFinding>& findings) {
  if (job.consistency == spec::Consistency::off) return std::nullopt;
  std::vector<events::HostStack> hosts;
  for (StackFinding& finding : findings) {
    if (finding.output.empty()) continue;  // unreachable: its own problem says so
    std::string why;
    finding.stack = read_stack(finding, why);
    if (!finding.stack) {
      finding.verdict = "unknown";
      finding.warnings.push_back(finding.host + ": software stack " + why);
      continue;
    }
    finding.verdict = "same";
    if (!finding.spare) hosts.push_back(*finding.stack);
  }
  if (hosts.empty()) return std::nullopt;
  events::StackComparison compared = events::compare_stacks(hosts);
  const bool strict = job.consistency == spec::Consistency::strict;
  // The run's verdict and action come from the hosts alone: a spare that differs is only left out.
  events::StackConsistency verdict = events::consistency_of(compared, spec::to_string(job.consistency), hosts);
  for (StackFinding& finding : findings) {
    if (!finding.stack) continue;
    std::vector<events::StackDifference> differences;
    if (finding.spare) {
      differences = events::stack_differences(compared, *finding.stack);
      verdict.differences.insert(verdict.differences.end(), differences.begin(), differences.end());
    } else {
      for (const events::StackDifference& difference : compared.differences) {
        if (difference.host == finding.host) differences.push_back(difference);
      }
    }
    if (differences.empty()) continue;
    finding.verdict = "DIFFERS";
    for (const events::StackDifference& difference : differences) {
      std::string text = describe(difference) +
                         (finding.spare ? " (a spare that differs is not used)"
                          : strict      ? "; fix: make the hosts the same, or set consistency: warn"
                                        : " (consistency: warn: the run starts anyway)");
      (strict && !finding.spare ? finding.problems : finding.warnings).push_back(text);
    }
  }
  if (!verdict.differences.empty()) verdict.verdict = events::StackConsistency::kDiffers;  // a spare's too
  return verdict;
}

}  // namespace dtrain::cli
