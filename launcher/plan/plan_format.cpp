// RankPlan → JSON (plan-<gen>.json), text (`dtrain plan`, supervisor.log) and one-line diffs.

#include <algorithm>
#include <tuple>
#include <string>

#include "launcher/base/strings.h"
#include "launcher/plan/rank_plan.h"

namespace dtrain::plan {
namespace {

std::string str(long long value) { return std::to_string(value); }

std::string pad_left(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

std::string pad_right(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::vector<std::string> parts;
  for (const std::vector<int>& group : groups) {
    std::vector<std::string> ranks;
    for (int rank : group) ranks.push_back(str(rank));
    parts.push_back("[" + join(ranks, ",") + "]");
  }
  return join(parts, " ");
}

/// The (tp, pp, dp) positions of `host`'s ranks, in rank order, and its ranks.
struct HostPositions {
  std::vector<std::tuple<int, int, int>> positions;
  std::vector<int> ranks;
};
HostPositions positions_of(const RankPlan& plan, const std::string& host) {
  HostPositions found;
  for (const RankSlot& slot : plan.ranks) {
    if (slot.host != host) continue;
    found.positions.emplace_back(slot.tp, slot.pp, slot.dp);
    found.ranks.push_back(slot.rank);
  }
  return found;
}

/// "ranks 4–7 at (tp,pp,dp) (0,0,1) (1,0,1) (0,1,1) (1,1,1)": at most 8 positions shown.
std::string describe_positions(const HostPositions& host) {
  if (host.ranks.empty()) return "no ranks";
  std::string text = host.ranks.size() == 1 ? "rank " + str(host.ranks.front())
                     : "ranks " + str(host.ranks.front()) + "–" + str(host.ranks.back());
  text += " at (tp,pp,dp)";
  for (size_t i = 0; i < host.positions.size() && i < 8; ++i) {
    auto [tp, pp, dp] = host.positions[i];
    text += " (" + str(tp) + "," + str(pp) + "," + str(dp) + ")";
  }
  if (host.positions.size() > 8) text += " …";
  return text;
}

std::vector<std::string> host_names(const RankPlan& plan) {
  std::vector<std::string> names;
  for (const PlanHost& host : plan.hosts) names.push_back(host.entry.name);
  return names;
}

}  // namespace

nlohmann::json to_json(const RankPlan& plan) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const PlanHost& host : plan.hosts) {
    hosts.push_back({{"name", host.entry.name},
                     {"user", host.entry.user},
                     {"port", host.entry.port},
                     {"slots", host.slots},
                     {"slots_used", host.slots_used},
                     {"only_slots", host.entry.only_slots},
                     {"spare", host.entry.spare},
                     {"ranks", host.ranks}});
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSlot& slot : plan.ranks) {
    ranks.push_back({{"rank", slot.rank},
                     {"host", slot.host},
                     {"host_index", slot.host_index},
                     {"local_rank", slot.local_rank},
                     {"slot", slot.slot},
                     {"dp", slot.dp},
                     {"pp", slot.pp},
                     {"tp", slot.tp}});
  }
  return {{"world_size", plan.world_size},
          {"tensor", plan.tensor},
          {"pipeline", plan.pipeline},
          {"data", plan.data},
          {"global_batch", plan.global_batch},
          {"micro_batch", plan.micro_batch},
          {"grad_accum", plan.grad_accum},
          {"hosts", std::move(hosts)},
          {"ranks", std::move(ranks)},
          {"groups", {{"tp", plan.tp_groups}, {"pp", plan.pp_groups}, {"dp", plan.dp_groups}}},
          {"without", plan.without},
          {"spares_used", plan.spares_used},
          {"notes", plan.notes}};
}

std::string summary_line(const RankPlan& plan) {
  std::string line = "world " + str(plan.world_size) + " = data " + str(plan.data) +
                     " × pipeline " + str(plan.pipeline) + " × tensor " + str(plan.tensor) + "; ";
  if (plan.global_batch == 0) return line + "global batch not set (grad_accum " + str(plan.grad_accum) + ")";
  return line + "global batch " + str(plan.global_batch) + " = micro " + str(plan.micro_batch) +
         " × data " + str(plan.data) + " × grad_accum " + str(plan.grad_accum);
}

std::string to_text(const RankPlan& plan) {
  std::vector<std::string> host_parts;
  size_t host_width = 4;
  for (const PlanHost& host : plan.hosts) {
    host_parts.push_back(host.entry.name + " " + str(host.slots_used) + "/" + str(host.slots) +
                         " slots" + (host.entry.spare ? ", spare" : ""));
    host_width = std::max(host_width, host.entry.name.size());
  }
  std::string text = "hosts: " + str(plan.hosts.size()) + " (" + join(host_parts, ", ") + ")\n";
  text += summary_line(plan) + "\n";
  if (!plan.without.empty()) {
    text += "without: " + join(plan.without, ", ");
    if (!plan.spares_used.empty()) text += "; spares used: " + join(plan.spares_used, ", ");
    text += "\n";
  }

  // device: the physical slot (DTRAIN_DEVICE, the GPU index nvidia-smi shows); it differs from
  // LOCAL_RANK when hosts[].only_slots chose slots.
  text += "rank  " + pad_right("host", host_width) + "  local  device   dp   pp   tp\n";
  for (const RankSlot& slot : plan.ranks) {
    text += pad_left(str(slot.rank), 4) + "  " + pad_right(slot.host, host_width) + "  " +
            pad_left(str(slot.local_rank), 5) + "  " + pad_left(str(slot.slot), 6) + "  " +
            pad_left(str(slot.dp), 3) + "  " + pad_left(str(slot.pp), 3) + "  " +
            pad_left(str(slot.tp), 3) + "\n";
  }
  text += "tensor groups: " + groups_text(plan.tp_groups) + "\n";
  text += "pipeline groups: " + groups_text(plan.pp_groups) + "\n";
  text += "data groups: " + groups_text(plan.dp_groups) + "\n";
  if (!plan.notes.empty()) {
    text += "notes:\n";
    for (const std::string& note : plan.notes) text += "  - " + note + "\n";
  }
  return text;
}

std::string diff_text(const RankPlan& before, const RankPlan& after) {
  std::vector<std::string> parts;
  auto compare = [&](const char* name, int old_value, int new_value) {
    if (old_value != new_value) parts.push_back(std::string(name) + " " + str(old_value) + " → " + str(new_value));
  };
  compare("world", before.world_size, after.world_size);
  compare("tensor", before.tensor, after.tensor);
  compare("pipeline", before.pipeline, after.pipeline);
  compare("data", before.data, after.data);
  compare("global_batch", before.global_batch, after.global_batch);
  compare("micro_batch", before.micro_batch, after.micro_batch);
  compare("grad_accum", before.grad_accum, after.grad_accum);

  std::vector<std::string> old_hosts = host_names(before), new_hosts = host_names(after);
  std::vector<std::string> changes;
  for (const std::string& name : old_hosts)
    if (std::find(new_hosts.begin(), new_hosts.end(), name) == new_hosts.end()) changes.push_back("−" + name);
  for (const std::string& name : new_hosts)
    if (std::find(old_hosts.begin(), old_hosts.end(), name) == old_hosts.end()) changes.push_back("+" + name);
  if (!changes.empty()) parts.push_back("hosts " + join(changes, " "));
  // Which positions each new host takes: a spare in a lost host's place keeps its data, tensor
  // and pipeline coordinates (its shards and its groups), which is what a person checks first.
  for (const std::string& name : new_hosts) {
    if (std::find(old_hosts.begin(), old_hosts.end(), name) != old_hosts.end()) continue;
    HostPositions taken = positions_of(after, name);
    std::string replaced;
    for (const std::string& old_name : old_hosts) {
      if (std::find(new_hosts.begin(), new_hosts.end(), old_name) != new_hosts.end()) continue;
      if (positions_of(before, old_name).positions == taken.positions) replaced = old_name;
    }
    parts.push_back(name + (replaced.empty() ? " runs " : " takes " + replaced + "'s place: ") +
                    describe_positions(taken));
  }
  return parts.empty() ? "no change" : join(parts, ", ");
}

}  // namespace dtrain::plan
