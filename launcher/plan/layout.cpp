#include "launcher/plan/layout.h"

#include <algorithm>

#include "launcher/base/strings.h"

namespace dtrain::plan::detail {
namespace {

std::string str(long long value) { return std::to_string(value); }

}  // namespace

int usable_slots(const spec::HostEntry& host, int slots_per_host) {
  if (!host.only_slots.empty()) return static_cast<int>(host.only_slots.size());
  return host.slots > 0 ? host.slots : slots_per_host;
}

Capacity capacity(const std::vector<Candidate>& hosts, int tensor) {
  Capacity result;
  int largest = 0;
  for (const Candidate& host : hosts) largest = std::max(largest, host.usable);
  // Mixing the two modes would let a group straddle hosts although one host could hold it;
  // deciding once keeps "a TP group never crosses a host when it fits in one" strictly true.
  result.spanning = tensor > largest;
  for (const Candidate& host : hosts) {
    int offered = result.spanning ? host.usable : host.usable / tensor * tensor;
    result.per_host.push_back(offered);
    result.total += offered;
  }
  result.groups = result.total / tensor;
  return result;
}

std::string describe_capacity(const std::vector<Candidate>& hosts, const Capacity& capacity) {
  constexpr size_t kShown = 8;  // error messages stay one readable line on big clusters
  std::vector<std::string> parts;
  for (size_t i = 0; i < hosts.size() && i < kShown; ++i) {
    std::string part = hosts[i].entry.name + " " + str(capacity.per_host[i]);
    if (capacity.per_host[i] != hosts[i].usable) part += " of " + str(hosts[i].usable);
    parts.push_back(part);
  }
  if (hosts.size() > kShown) parts.push_back("… " + str(hosts.size() - kShown) + " more");
  return join(parts, ", ");
}

RankPlan lay_out(const std::vector<Candidate>& hosts, const Capacity& capacity, int tensor,
                 int pipeline, int data) {
  RankPlan plan;
  plan.tensor = tensor;
  plan.pipeline = pipeline;
  plan.data = data;
  plan.world_size = tensor * pipeline * data;
  plan.ranks.resize(plan.world_size);

  std::vector<std::string> crossing;
  int rank = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const Candidate& host = hosts[i];
    const std::string& name = host.entry.name;
    int take = std::min(capacity.per_host[i], plan.world_size - rank);
    if (take == 0) {
      plan.notes.push_back(name + " runs no ranks: " +
                           (capacity.per_host[i] == 0
                                ? "its " + str(host.usable) + " slots cannot hold a tensor=" +
                                      str(tensor) + " group"
                                : "world " + str(plan.world_size) + " fills the hosts before it"));
      continue;
    }
    PlanHost placed;
    placed.entry = host.entry;
    placed.slots = host.usable;
    placed.slots_used = take;
    const int host_index = static_cast<int>(plan.hosts.size());
    for (int local = 0; local < take; ++local, ++rank) {
      RankSlot& slot = plan.ranks[rank];
      slot.rank = rank;
      slot.host_index = host_index;
      slot.host = name;
      slot.local_rank = local;
      slot.slot = host.entry.only_slots.empty() ? local : host.entry.only_slots[local];
      slot.tp = rank % tensor;
      slot.dp = (rank / tensor) % data;
      slot.pp = rank / (tensor * data);
      placed.ranks.push_back(rank);
    }
    if (take < host.usable) {
      bool by_groups = take == capacity.per_host[i] && !capacity.spanning;
      plan.notes.push_back(name + " uses " + str(take) + " of " + str(host.usable) + " slots: " +
                           (by_groups ? "tensor=" + str(tensor) + " groups stay inside a host"
                                      : "world " + str(plan.world_size) + " needs no more"));
    }
    if (capacity.spanning) crossing.push_back(str(host.usable) + " slots on " + name);
    plan.hosts.push_back(std::move(placed));
  }
  if (!crossing.empty())
    plan.notes.insert(plan.notes.begin(),
                      "TP groups cross hosts: tensor=" + str(tensor) + " > " + join(crossing, ", "));

  // Megatron's groups: rank = (pp × data + dp) × tensor + tp.
  auto rank_of = [&](int pp, int dp, int tp) { return (pp * data + dp) * tensor + tp; };
  for (int pp = 0; pp < pipeline; ++pp)
    for (int dp = 0; dp < data; ++dp) {
      std::vector<int> group;
      for (int tp = 0; tp < tensor; ++tp) group.push_back(rank_of(pp, dp, tp));
      plan.tp_groups.push_back(std::move(group));
    }
  for (int dp = 0; dp < data; ++dp)
    for (int tp = 0; tp < tensor; ++tp) {
      std::vector<int> group;
      for (int pp = 0; pp < pipeline; ++pp) group.push_back(rank_of(pp, dp, tp));
      plan.pp_groups.push_back(std::move(group));
    }
  for (int pp = 0; pp < pipeline; ++pp)
    for (int tp = 0; tp < tensor; ++tp) {
      std::vector<int> group;
      for (int dp = 0; dp < data; ++dp) group.push_back(rank_of(pp, dp, tp));
      plan.dp_groups.push_back(std::move(group));
    }
  return plan;
}

}  // namespace dtrain::plan::detail
