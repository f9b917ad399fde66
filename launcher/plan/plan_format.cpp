// RankPlan → JSON (plan-<gen>.json), text (`dtrain plan`, supervisor.log) and one-line diffs.

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>

#include "launcher/base/plan_change.h"
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

/// The plan as a plan change is told (launcher/base/plan_change.h).
PlanShape shape_of(const RankPlan& plan) {
  PlanShape shape = plan_shape_sizes(plan);
  // One pass over the ranks, each to its host by name: a scan of every rank per host was
  // hosts × ranks string compares, 14 s of a stalled loop at 16,384 hosts × 8 (every agent
  // fenced for silence meanwhile; found with perf on dtrain-sim --fault relay-loss).
  std::unordered_map<std::string_view, size_t> host_position;
  shape.hosts.reserve(plan.hosts.size());
  for (const PlanHost& host : plan.hosts) {
    host_position.emplace(host.entry.name, shape.hosts.size());
    shape.hosts.emplace_back().name = host.entry.name;
  }
  for (const RankSlot& slot : plan.ranks) {
    auto position = host_position.find(slot.host);
    if (position != host_position.end()) shape.hosts[position->second].ranks.push_back({slot.rank, slot.tp, slot.pp, slot.dp});
  }
  return shape;
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
  return plan_change_line(shape_of(before), shape_of(after));
}

}  // namespace dtrain::plan
