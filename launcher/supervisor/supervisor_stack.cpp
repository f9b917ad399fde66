// One software stack (spec `consistency`): the hosts' stacks, as their agents reported them at
// hello, compared before the first generation (launcher/events/stack_comparison.h), and each
// spare judged against them. strict refuses to start when a host differs; warn starts with the
// difference recorded; either way a spare that differs is never planned.

#include <algorithm>

#include "launcher/base/strings.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::supervisor {

namespace {

/// "torch, file train.py": the items a host differs on.
std::string items_of(const std::vector<events::StackDifference>& differences, const std::string& host) {
  std::vector<std::string> items;
  for (const events::StackDifference& difference : differences) {
    if (difference.host == host) items.push_back(difference.item);
  }
  return join(items, ", ");
}

std::string differing_text(const events::StackConsistency& verdict) {
  std::vector<std::string> parts;
  for (const std::string& host : verdict.differing_hosts()) parts.push_back(host + " (" + items_of(verdict.differences, host) + ")");
  return join(parts, "; ");
}

}  // namespace

void Supervisor::note_stack(const HostConnected& event) {
  if (spec_.consistency == spec::Consistency::off) return;
  // A host that said nothing (an agent that did not parse its stack) is every item unknown.
  stacks_[event.host] = event.stack.value_or(events::HostStack{event.host});
  stacks_[event.host].host = event.host;
  if (stacks_compared_) judge_spare_stack(event.host);
}

bool Supervisor::stacks_allow_start() {
  if (spec_.consistency == spec::Consistency::off || stacks_compared_) return true;
  stacks_compared_ = true;
  std::vector<events::HostStack> planned;
  for (const plan::PlanHost& host : plan_.hosts) {
    auto stack = stacks_.find(host.entry.name);
    planned.push_back(stack == stacks_.end() ? events::HostStack{host.entry.name} : stack->second);
  }
  stack_reference_ = events::compare_stacks(planned);
  const bool strict = spec_.consistency == spec::Consistency::strict;
  events::StackConsistency verdict = events::consistency_of(stack_reference_, spec::to_string(spec_.consistency), planned);
  const bool differs = !verdict.differences.empty();
  if (!differs) {
    verdict.detail = "the software stack is the same on " + std::to_string(planned.size()) + " host" +
                     (planned.size() == 1 ? "" : "s");
  } else {
    verdict.detail = "the software stack differs between hosts (consistency: " + verdict.mode +
                     "): " + differing_text(verdict) +
                     (strict ? "; the run does not start. Make the hosts the same (the image, the packages, the "
                               "script), or set consistency: warn to start anyway"
                             : "; the run starts anyway");
  }
  if (!verdict.unknown.empty()) {
    verdict.detail += "; not compared (could not be read): " + events::unknown_text(verdict.unknown, planned.size());
  }
  // One host alone has nothing to compare: recorded only when there is (or may be) another, and
  // when some agent said its stack (simulated agents and older dtrains say nothing).
  bool reported = std::any_of(planned.begin(), planned.end(), [](const events::HostStack& host) { return !host.items.empty(); });
  if (reported && (planned.size() > 1 || !spec_.spares.empty())) {
    record(verdict.to_json());
    stack_verdicts_.push_back(verdict);
  }
  for (const spec::HostEntry& spare : spec_.spares) {
    if (stacks_.count(spare.name)) judge_spare_stack(spare.name);
  }
  if (differs && strict) {
    give_up_reason_ = verdict.detail;
    stop_generation(Ending::fail, ExitCode::infra, "consistency: strict");
    return false;
  }
  return true;
}

void Supervisor::judge_spare_stack(const std::string& host) {
  bool spare = std::any_of(spec_.spares.begin(), spec_.spares.end(),
                           [&](const spec::HostEntry& entry) { return entry.name == host; });
  bool planned = std::any_of(plan_.hosts.begin(), plan_.hosts.end(),
                             [&](const plan::PlanHost& entry) { return entry.entry.name == host; });
  if (!spare || planned || excluded_.count(host)) return;
  std::vector<events::StackDifference> differences = events::stack_differences(stack_reference_, stacks_[host]);
  if (differences.empty()) return;
  excluded_.insert(host);
  events::StackConsistency verdict;
  verdict.mode = spec::to_string(spec_.consistency);
  verdict.verdict = events::StackConsistency::kDiffers;
  verdict.action = events::StackConsistency::kSpareLeftOut;
  verdict.hosts = {host};
  verdict.differences = std::move(differences);
  verdict.detail = "spare " + host + "'s software stack differs from the hosts' (" + items_of(verdict.differences, host) +
                   "): it is not used";
  record(verdict.to_json());
  stack_verdicts_.push_back(std::move(verdict));
}

}  // namespace dtrain::supervisor
