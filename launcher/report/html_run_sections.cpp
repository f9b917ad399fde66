// report.html's sections about the run as a whole: its outcome and root cause, and its plan
// (ranks, hosts, GPU topology) per generation.

#include "launcher/report/html_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"
#include "launcher/report/downsample.h"

namespace dtrain::report::page {

using nlohmann::json;

/// "rank 1 on localhost (worker.exit): killed by SIGKILL"
std::string cause_line(int rank, const std::string& host, const std::string& kind, const std::string& detail) {
  std::string text;
  if (rank >= 0) text += "rank " + std::to_string(rank) + " on ";
  text += host.empty() ? "?" : host;
  if (!kind.empty()) text += " (" + kind + ")";
  return detail.empty() ? text : text + ": " + detail;
}

/// The root cause: what run.finished names, else the supervisor's failure.root_cause, else the
/// first failure detected; empty when there was no failure.
std::string root_cause_line(const RunRecord& record, const events::RunFinished* finished,
                            const std::vector<const LoggedEvent*>& detected) {
  if (finished && finished->root_cause) {
    const events::RunRootCause& cause = *finished->root_cause;
    return cause_line(cause.rank, cause.host, events::to_string(cause.kind), cause.detail);
  }
  if (const auto* root = last_event<events::FailureRootCause>(record)) return cause_line(root->rank, root->host, "", root->detail);
  if (detected.empty()) return "";
  const events::FailureCause& first = std::get<events::FailureDetected>(detected.front()->event).cause;
  return cause_line(first.rank.value_or(-1), first.host, events::to_string(first.kind), first.detail);
}

std::string outcome_section(const RunRecord& record, const Timeline& timeline) {
  const auto* finished = last_event<events::RunFinished>(record);
  std::string state = finished ? (finished->state.empty() ? "unknown" : finished->state)
                               : (record.state && !record.state->state.empty() ? record.state->state : "unknown");
  std::string css = state == "succeeded" ? "succeeded" : state == "failed" ? "failed" : "other";
  std::string out = "<section id=\"outcome\"><h2>Outcome and root cause</h2>";
  out += "<div class=\"outcome " + css + "\" data-state=\"" + e(state) + "\">" + e(state);
  if (finished) out += " · exit " + std::to_string(finished->exit_code);
  out += "</div>";
  if (!finished) {
    out += "<p class=\"warn\">No run.finished event: the run was still going when this report was made, or its "
           "supervisor ended without a final state (state.json says <b>" +
           e(!record.state ? "nothing" : record.state->state.empty() ? "unknown" : record.state->state) +
           "</b>).</p>";
  }
  out += "<table>";
  auto row = [&](const std::string& label, const std::string& value) {
    out += "<tr><th>" + e(label) + "</th><td>" + value + "</td></tr>";
  };
  row("started", e(format_timestamp_utc(timeline.start_ms)));
  row("duration", e(human_ms(finished ? finished->duration_ms : timeline.end_ms - timeline.start_ms)));
  row("generations", std::to_string(timeline.generations.size()));
  row("restarts", finished ? std::to_string(finished->restarts) : std::to_string(timeline.recoveries.size()));
  if (const auto* submitted = last_event<events::RunSubmitted>(record)) {
    row("world size at submit", std::to_string(submitted->world_size));
    row("spec", e(submitted->spec));
  }
  // The hang timeouts in force at the end (state.json), else as last recorded; an auto one says
  // what it was set from, and how often it moved.
  const events::HangTimeoutChanged* in_force = record.state && record.state->hang_timeout
                                                   ? &*record.state->hang_timeout
                                                   : last_event<events::HangTimeoutChanged>(record);
  if (in_force) {
    size_t changes = events_of<events::HangTimeoutChanged>(record).size();
    row("hang timeout", e(in_force->text() + (changes > 0 ? " · set " + std::to_string(changes) +
                                                              " time(s) (hang_timeout.changed)"
                                                        : "")));
  }
  if (metrics::StepSplit split = step_split_of(record); split.bottleneck) {
    row("bottleneck", "<a href=\"#step-split\">" + e(metrics::to_string(*split.bottleneck)) + "</a> · " +
                          e(split.shares_text()));
  }
  out += "</table>";

  std::vector<const LoggedEvent*> detected = events_of<events::FailureDetected>(record);
  if (std::string cause = root_cause_line(record, finished, detected); !cause.empty()) {
    out += "<div class=\"cause\" id=\"root-cause\"><b>" +
           std::string(state == "failed" ? "Root cause" : "Failure (recovered)") + ":</b> " + e(cause) + "</div>";
  } else {
    out += "<p>No failure was detected.</p>";
  }
  if (!detected.empty()) {
    out += "<h3>Every failure detected (" + std::to_string(detected.size()) + ")</h3><table><tr><th>when</th><th>gen</th><th>kind</th><th>where</th><th>detail</th></tr>";
    size_t shown = 0;
    for (const LoggedEvent* event : detected) {
      if (++shown > 50) break;
      const events::FailureCause& cause = std::get<events::FailureDetected>(event->event).cause;
      std::optional<int64_t> at = event->wall_ms();
      std::string where = cause.rank ? "rank " + std::to_string(*cause.rank) + " on " : "";
      out += "<tr class=\"failure-row\" data-kind=\"" + e(events::to_string(cause.kind)) + "\"><td>" +
             e(at ? since(*at, timeline.start_ms) : "?") + "</td><td class=\"n\">" + std::to_string(event->gen.value_or(0)) +
             "</td><td>" + e(events::to_string(cause.kind)) + "</td><td>" + e(where + cause.host) + "</td><td>" + e(cause.detail) +
             "</td></tr>";
    }
    out += "</table>";
    if (detected.size() > 50) out += "<p class=\"note\">" + std::to_string(detected.size() - 50) + " more in events.jsonl.</p>";
  }
  return out + "</section>";
}

/// Every host.health in order (a host may be checked at the start, when it joins, after a
/// failure) with the checks that were not ok, and the hosts the run quarantined; "" when no agent
/// was asked to check its host.
std::string health_part(const RunRecord& record) {
  std::vector<const events::HostHealth*> checks;
  std::vector<const events::HostQuarantined*> quarantined;
  std::vector<events::QuarantinedHost> planned_without;  // plan.quarantined: held by the registry
  for (const LoggedEvent& logged : record.events) {
    if (const auto* health = std::get_if<events::HostHealth>(&logged.event)) checks.push_back(health);
    if (const auto* quarantine = std::get_if<events::HostQuarantined>(&logged.event)) quarantined.push_back(quarantine);
    if (const auto* plan = std::get_if<events::PlanQuarantined>(&logged.event)) {
      planned_without.insert(planned_without.end(), plan->hosts.begin(), plan->hosts.end());
    }
  }
  if (checks.empty() && quarantined.empty() && planned_without.empty()) return "";
  std::string out = "<h3 id=\"health\">Host health (host.health)</h3>";
  for (const events::QuarantinedHost& held : planned_without) {
    out += "<p class=\"warn planned-without\" data-host=\"" + e(held.host) + "\">" + e(held.host) +
           " was left out of this run's plan: quarantined in the registry until " + e(held.until) + " (" + e(held.reason) +
           "); <code>dtrain hosts release " + e(held.host) + "</code> brings it back</p>";
  }
  out += "<table><tr><th>host</th><th>moment</th><th>verdict</th>"
         "<th>action</th><th class=\"n\">ms</th><th>checks not ok</th></tr>";
  for (const events::HostHealth* health : checks) {
    std::string said;
    for (const events::HealthCheckResult& check : health->checks) {
      if (check.verdict != events::HealthCheckResult::kOk) said += "<div>" + e(check.name + " (" + check.verdict + "): " + check.message) + "</div>";
    }
    bool bad = health->verdict != events::HealthCheckResult::kOk;
    out += std::string("<tr class=\"health-row\" data-host=\"") + e(health->host) + "\" data-verdict=\"" + e(health->verdict) +
           "\"><td>" + e(health->host) + "</td><td>" + e(health->moment) + "</td><td" + (bad ? " class=\"warn\"" : "") + ">" +
           e(health->verdict) + "</td><td>" + e(health->action) + "</td><td class=\"n\">" + std::to_string(health->ms) +
           "</td><td>" + (said.empty() ? "-" : said) + "</td></tr>";
  }
  out += "</table>";
  for (const events::HostQuarantined* quarantine : quarantined) {
    out += "<p class=\"warn quarantined\" data-host=\"" + e(quarantine->host) + "\">" + e(quarantine->host) +
           " quarantined: " + e(quarantine->reason) + " (" + e(join(quarantine->evidence, "; ")) +
           "); later runs leave it out until <code>dtrain hosts release " + e(quarantine->host) + "</code></p>";
  }
  return out;
}

/// The hosts' software stacks (host.stack) side by side, hosts with the same stack in one
/// column, and what each stack.consistency found; "" when no agent reported a stack.
std::string stack_part(const RunRecord& record) {
  std::map<std::string, const events::HostStack*> newest;  // by host: a resumed run's agents say it again
  std::vector<const events::StackConsistency*> verdicts;
  for (const LoggedEvent& logged : record.events) {
    if (const auto* stack = std::get_if<events::HostStack>(&logged.event)) newest[stack->host] = stack;
    if (const auto* verdict = std::get_if<events::StackConsistency>(&logged.event)) verdicts.push_back(verdict);
  }
  if (newest.empty()) return "";
  std::vector<std::string> items;
  std::map<std::string, std::vector<std::string>> groups;  // the stack's items as text → hosts
  std::map<std::string, const events::HostStack*> group_stack;
  for (const auto& [host, stack] : newest) {
    std::string key;
    for (const events::StackItem& item : stack->items) {
      if (std::find(items.begin(), items.end(), item.item) == items.end()) items.push_back(item.item);
      key += item.item + "=" + item.value + "\n";
    }
    groups[key].push_back(host);
    group_stack[key] = stack;
  }
  std::set<std::pair<std::string, std::string>> differing;  // (host, item)
  for (const events::StackConsistency* verdict : verdicts) {
    for (const events::StackDifference& difference : verdict->differences) differing.insert({difference.host, difference.item});
  }
  std::string out = "<h3>Software stack (host.stack)</h3>";
  for (const events::StackConsistency* verdict : verdicts) {
    out += std::string("<p") + (verdict->differences.empty() ? "" : " class=\"warn\"") + ">" + e(verdict->text()) + "</p>";
  }
  out += "<table><tr><th>item</th>";
  for (const auto& [key, hosts] : groups) {
    std::string names = hosts.size() <= 6 ? join(hosts, ", ") : hosts.front() + " … " + hosts.back() + " (" +
                                                                     std::to_string(hosts.size()) + " hosts)";
    out += "<th>" + e(names) + "</th>";
  }
  out += "</tr>";
  for (const std::string& item : items) {
    out += "<tr><td>" + e(item) + "</td>";
    for (const auto& [key, hosts] : groups) {
      const std::string* value = group_stack[key]->value_of(item);
      bool differs = std::any_of(hosts.begin(), hosts.end(), [&](const std::string& host) { return differing.count({host, item}) > 0; });
      out += std::string("<td") + (differs ? " class=\"warn\"" : "") + ">" + e(value ? *value : "-") + "</td>";
    }
    out += "</tr>";
  }
  return out + "</table>";
}

std::string plan_section(const RunRecord& record) {
  std::string out = "<section id=\"plan\"><h2>Plan and GPU topology</h2>";
  if (record.plans.empty()) out += "<p>No plan-&lt;gen&gt;.json in the run directory.</p>";
  // Each host's GPUs as "8 × NVIDIA H100", for the plan tables (hosts/*.json).
  std::map<std::string, std::string> gpus_of;
  for (const HostFacts& host : record.hosts) {
    std::map<std::string, int> models;
    for (const HostFacts::Gpu& gpu : host.gpus) ++models[gpu.name.empty() ? "GPU" : gpu.name];
    std::vector<std::string> parts;
    for (const auto& [model, count] : models) parts.push_back(std::to_string(count) + " × " + model);
    gpus_of[host.name] = parts.empty() ? "none" : join(parts, ", ");
  }
  auto gpus_text = [&](const std::string& host) {
    auto found = gpus_of.find(host);
    return found == gpus_of.end() ? std::string("?") : found->second;
  };
  const PlanRecord* previous = nullptr;
  for (const auto& [generation, plan] : record.plans) {
    std::string headline = "gen " + std::to_string(generation) + ": world " + std::to_string(plan.world_size) + " = dp " +
                           std::to_string(plan.data) + " × pp " + std::to_string(plan.pipeline) + " × tp " +
                           std::to_string(plan.tensor) + "; global batch " +
                           (plan.global_batch ? std::to_string(plan.global_batch) : std::string("not set")) + " = micro " +
                           std::to_string(plan.micro_batch) + " × dp × grad_accum " + std::to_string(plan.grad_accum);
    // A restart in place keeps the layout: one line says so instead of the same table again.
    if (previous && same_layout(*previous, plan)) {
      out += "<h3 data-gen=\"" + std::to_string(generation) + "\">" + e(headline) + "</h3><p class=\"note\">same hosts and ranks as gen " +
             std::to_string(previous->generation) + "</p>";
      previous = &plan;
      continue;
    }
    previous = &plan;
    out += "<h3 data-gen=\"" + std::to_string(generation) + "\">" + e(headline) + "</h3>";
    if (!plan.without.empty()) out += "<p>without: " + e(join(plan.without, ", ")) + "</p>";
    if (!plan.spares_used.empty()) out += "<p>spares in use: " + e(join(plan.spares_used, ", ")) + "</p>";
    // Up to 8 hosts one per row; more: the first and last few, the rest counted.
    constexpr size_t kShownHosts = 8;
    out += "<table><tr><th>host</th><th>ranks</th><th>GPUs</th></tr>";
    for (size_t i = 0; i < plan.hosts.size(); ++i) {
      bool shown = plan.hosts.size() <= kShownHosts || i < kShownHosts / 2 || i >= plan.hosts.size() - 2;
      if (!shown) {
        if (i == kShownHosts / 2) {
          out += "<tr><td colspan=\"3\" class=\"note\">… " + std::to_string(plan.hosts.size() - kShownHosts / 2 - 2) +
                 " more hosts (plan-" + std::to_string(generation) + ".json)</td></tr>";
        }
        continue;
      }
      const PlanRecord::Host& host = plan.hosts[i];
      std::vector<int> ranks;
      for (const PlanRecord::Rank& rank : host.ranks) ranks.push_back(rank.rank);
      out += "<tr><td>" + e(host.name) + (host.spare ? " (spare)" : "") + "</td><td>" + e(ranges(ranks)) + "</td><td>" +
             e(gpus_text(host.name)) + "</td></tr>";
    }
    out += "</table>";
  }

  // Hosts with the same facts are one row: a thousand-host run has a handful of machine types.
  if (!record.hosts.empty()) {
    struct Group {
      std::vector<std::string> names;
      const HostFacts* facts;
    };
    std::map<std::string, Group> groups;
    for (const HostFacts& host : record.hosts) {
      std::string key = std::to_string(host.cpus) + "|" + std::to_string(host.memory_mb) + "|" + host.topology + "|" + host.version;
      for (const HostFacts::Gpu& gpu : host.gpus) key += "|" + gpu.name;
      auto [group, added] = groups.try_emplace(key, Group{{}, &host});
      group->second.names.push_back(host.name);
    }
    out += "<h3>Hosts (hosts/*.json)</h3><table><tr><th>hosts</th><th>CPUs</th><th>memory</th><th>GPUs</th><th>dtrain</th></tr>";
    std::vector<std::string> topologies;
    for (const auto& [key, group] : groups) {
      std::string names = group.names.size() <= 6 ? join(group.names, ", ")
                                                   : group.names.front() + " … " + group.names.back() + " (" +
                                                         std::to_string(group.names.size()) + " hosts)";
      out += "<tr><td>" + e(names) + "</td><td class=\"n\">" + std::to_string(group.facts->cpus) + "</td><td class=\"n\">" +
             e(human_bytes(static_cast<double>(group.facts->memory_mb) * 1048576.0)) + "</td><td>" +
             e(gpus_text(group.facts->name)) + "</td><td>" + e(group.facts->version) + "</td></tr>";
      if (!group.facts->topology.empty()) {
        topologies.push_back("<h3>GPU topology: " + e(names) + "</h3><pre>" + e(group.facts->topology) + "</pre>");
      }
    }
    out += "</table>";
    for (const std::string& topology : topologies) out += topology;
  }
  out += stack_part(record);
  out += health_part(record);
  return out + "</section>";
}

}  // namespace dtrain::report::page
