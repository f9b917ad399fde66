#include "launcher/base/plan_change.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "launcher/base/strings.h"

namespace dtrain {
namespace {

/// The names in `after` that `before` lacks, in `after`'s order. Hashed: at 16,384 hosts a
/// linear lookup per name made every plan change cost seconds.
std::vector<std::string> added(const std::vector<std::string>& before, const std::vector<std::string>& after) {
  std::unordered_set<std::string_view> known(before.begin(), before.end());
  std::vector<std::string> out;
  for (const std::string& name : after) {
    if (!known.count(name)) out.push_back(name);
  }
  return out;
}

/// "host a excluded" / "hosts a, b excluded" / "hosts a, b, ... h and 1,096 more excluded": a
/// line a person reads; the whole list is the event's `without`.
std::string counted(const char* one, const char* many, const std::vector<std::string>& names, const char* verb) {
  constexpr size_t kNamed = 8;
  if (names.size() <= kNamed + 1) return std::string(names.size() == 1 ? one : many) + " " + join(names, ", ") + " " + verb;
  std::vector<std::string> first(names.begin(), names.begin() + kNamed);
  return std::string(many) + " " + join(first, ", ") + " and " + std::to_string(names.size() - kNamed) + " more " + verb;
}

std::vector<std::string> host_names(const PlanShape& plan) {
  std::vector<std::string> names;
  for (const PlanShape::Host& host : plan.hosts) names.push_back(host.name);
  return names;
}

using HostIndex = std::unordered_map<std::string_view, const PlanShape::Host*>;

HostIndex index_hosts(const PlanShape& plan) {
  HostIndex index;
  for (const PlanShape::Host& host : plan.hosts) index.emplace(host.name, &host);
  return index;
}

const PlanShape::Host* find_host(const HostIndex& index, const std::string& name) {
  auto found = index.find(name);
  return found == index.end() ? nullptr : found->second;
}

bool same_positions(const PlanShape::Host& a, const PlanShape::Host& b) {
  return std::equal(a.ranks.begin(), a.ranks.end(), b.ranks.begin(), b.ranks.end(),
                    [](const PlanShape::Host::Rank& x, const PlanShape::Host::Rank& y) {
                      return x.tp == y.tp && x.pp == y.pp && x.dp == y.dp;
                    });
}

/// "ranks 4–7 at (tp,pp,dp) (0,0,1) (1,0,1) (0,1,1) (1,1,1)": at most 8 positions shown.
std::string describe_positions(const PlanShape::Host& host) {
  if (host.ranks.empty()) return "no ranks";
  auto str = [](int value) { return std::to_string(value); };
  std::string text = host.ranks.size() == 1 ? "rank " + str(host.ranks.front().rank)
                                            : "ranks " + str(host.ranks.front().rank) + "–" + str(host.ranks.back().rank);
  text += " at (tp,pp,dp)";
  for (size_t i = 0; i < host.ranks.size() && i < 8; ++i) {
    const PlanShape::Host::Rank& rank = host.ranks[i];
    text += " (" + str(rank.tp) + "," + str(rank.pp) + "," + str(rank.dp) + ")";
  }
  if (host.ranks.size() > 8) text += " …";
  return text;
}

}  // namespace

PlanChangeText describe_plan_change(const PlanShape& before, const PlanShape& after) {
  PlanChangeText out;
  auto ranks = [](int count) { return std::to_string(count) + (count == 1 ? " rank" : " ranks"); };
  out.world_changed = before.world_size != after.world_size;
  if (after.world_size < before.world_size) {
    out.size = "shrunk from " + std::to_string(before.world_size) + " to " + ranks(after.world_size);
  } else if (after.world_size > before.world_size) {
    out.size = "grew from " + std::to_string(before.world_size) + " to " + ranks(after.world_size);
  } else {
    out.size = "still " + ranks(after.world_size);
  }

  const HostIndex before_hosts = index_hosts(before), after_hosts = index_hosts(after);
  // Excluded hosts that ran ranks: leaving out one that ran none changes nothing.
  std::vector<std::string> excluded;
  for (const std::string& name : added(before.without, after.without)) {
    const PlanShape::Host* host = find_host(before_hosts, name);
    if (host && !host->ranks.empty()) excluded.push_back(name);
  }
  if (!excluded.empty()) out.details.push_back(counted("host", "hosts", excluded, "excluded"));
  if (std::vector<std::string> spares = added(before.spares_used, after.spares_used); !spares.empty()) {
    out.details.push_back(counted("spare", "spares", spares, "in use"));
  }
  // Which positions each new host takes: a spare in a lost host's place keeps its data, tensor
  // and pipeline coordinates (its shards and its groups), which is what a person checks first.
  std::vector<std::string> old_hosts = host_names(before), new_hosts = host_names(after);
  const std::vector<std::string> gone = added(new_hosts, old_hosts);
  for (const std::string& name : added(old_hosts, new_hosts)) {
    const PlanShape::Host& taken = *find_host(after_hosts, name);
    std::string replaced;
    for (const std::string& old_name : gone) {
      if (same_positions(*find_host(before_hosts, old_name), taken)) replaced = old_name;
    }
    out.details.push_back(name + (replaced.empty() ? " runs " : " takes " + replaced + "'s place: ") +
                          describe_positions(taken));
  }

  auto changed = [&](const char* name, int old_value, int new_value) {
    if (old_value != new_value) {
      out.details.push_back(std::string(name) + " " + std::to_string(old_value) + " → " + std::to_string(new_value));
    }
  };
  changed("data", before.data, after.data);
  changed("pipeline", before.pipeline, after.pipeline);
  changed("tensor", before.tensor, after.tensor);
  changed("micro batch", before.micro_batch, after.micro_batch);
  changed("grad_accum", before.grad_accum, after.grad_accum);
  changed("global batch", before.global_batch, after.global_batch);
  return out;
}

std::string plan_change_line(const PlanShape& before, const PlanShape& after) {
  PlanChangeText change = describe_plan_change(before, after);
  std::vector<std::string> parts;
  if (change.world_changed) parts.push_back(change.size);
  parts.insert(parts.end(), change.details.begin(), change.details.end());
  return parts.empty() ? "no change" : join(parts, "; ");
}

}  // namespace dtrain
