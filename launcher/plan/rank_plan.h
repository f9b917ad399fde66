#pragma once
// Rank layout: world = DP × PP × TP over the hosts' slots. Ranks are ordered TP fastest, then
// DP, then PP (Megatron order), and placed on hosts in order so that a TP group never crosses a
// host when it fits in one. Pure functions: the supervisor calls make_plan again after losing
// hosts, and `dtrain plan --without` shows the user exactly that plan.
//
// The exact rules (tests/unit/plan_*_test.cpp pin each one):
//
//  1. Hosts: spec.hosts in order (entries marked `spare` count as spares), minus `without`. Each
//     host in `without` is replaced, in its position, by the next spare (spec.spares in order)
//     that is not itself in `without`. A `without` name that is neither a host nor a spare is a
//     user error that lists them.
//  2. Usable slots of a host: only_slots.size() when the include filter chose slots, else
//     HostEntry::slots, else spec.slots_per_host.
//  3. Capacity: when tensor ≤ the usable slots of at least one host, every host offers only
//     whole TP groups, floor(usable / tensor) × tensor slots (6 slots with tensor=4: 4 are
//     used; a 2-slot host runs nothing), so a TP group never crosses a host. When tensor is
//     larger than every host, every host offers all its slots and TP groups span consecutive
//     hosts (a note says so). The mode is decided once for the whole host set.
//  4. Rank r = (pp × data + dp) × tensor + tp: tp = r % tensor, dp = (r / tensor) % data,
//     pp = r / (tensor × data). Rank r takes the r-th capacity slot: hosts fill in order.
//     LOCAL_RANK is the index among the slots a host uses (0, 1, ...); RankSlot::slot is the
//     physical slot (GPU index): only_slots[local_rank] when the include filter chose slots.
//     Hosts left with no rank are not in RankPlan::hosts (a note names them).
//  5. data: a fixed parallelism.data needs data × pipeline × tensor slots of capacity; `0` (auto)
//     takes the most whole replicas that fit. Without `without`, too little capacity is an
//     error saying what is needed and what is there.
//  6. Shrink: when the hosts left (after spares) hold fewer replicas than the full host set,
//     whole DP replicas are dropped — only if elastic.min_hosts > 0 and at least min_hosts hosts
//     still run ranks. The micro batch of the full plan is kept and grad_accum raised to keep
//     the global batch; data is the largest count ≤ what fits for which that divides exactly.
//     A re-plan never grows data beyond the full plan's (a bigger spare leaves slots idle).
//     Losing a host that ran no ranks changes nothing and needs no min_hosts; losing hosts
//     with min_hosts > 0 still requires min_hosts hosts to run ranks.
//  7. Batch: global 0 → grad_accum 1, global batch 0 (micro as given, informational). Otherwise
//     micro = batch.micro, or global / data when batch.micro is 0, and grad_accum =
//     global / (micro × data) must be a positive integer.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::plan {

/// Where one rank runs and its coordinates.
struct RankSlot {
  int rank = 0;
  int host_index = 0;   ///< index into RankPlan::hosts (GROUP_RANK)
  std::string host;
  int local_rank = 0;   ///< index among the slots this host uses (LOCAL_RANK)
  int slot = 0;         ///< physical slot / GPU index: only_slots[local_rank], else local_rank
  int dp = 0, pp = 0, tp = 0;
};

struct PlanHost {
  spec::HostEntry entry;
  int slots = 0;        ///< usable slots (rule 2); slots_used ≤ slots
  int slots_used = 0;
  std::vector<int> ranks;
};

struct RankPlan {
  int world_size = 0;
  int tensor = 1, pipeline = 1, data = 1;
  int global_batch = 0;   ///< 0 when the spec sets none
  int micro_batch = 0;
  int grad_accum = 1;     ///< global_batch / (micro_batch × data)
  std::vector<PlanHost> hosts;            ///< hosts that run ranks, in order
  std::vector<RankSlot> ranks;            ///< index == rank
  std::vector<std::vector<int>> tp_groups, pp_groups, dp_groups;
  std::vector<std::string> without;       ///< hosts left out (lost or excluded)
  std::vector<std::string> spares_used;   ///< spares that replaced them
  std::vector<std::string> notes;         ///< "dropped 1 data-parallel replica: grad_accum 2 → 3"
};

/// Plans `spec` without the hosts in `without` (lost/excluded), taking spares to replace them
/// first; when none are left, drops whole DP replicas (if elastic.min_hosts allows) and raises
/// grad accumulation to keep the global batch. Errors say why no plan is possible.
Result<RankPlan> make_plan(const spec::JobSpec& spec, const std::vector<std::string>& without = {});

/// Stable JSON (plan-<gen>.json): world_size, tensor, pipeline, data, global_batch, micro_batch,
/// grad_accum, hosts [{name,user,port,slots,slots_used,only_slots,spare,ranks}],
/// ranks [{rank,host,host_index,local_rank,slot,dp,pp,tp}], groups {tp,pp,dp}, without,
/// spares_used, notes.
nlohmann::json to_json(const RankPlan& plan);
/// Hosts, rank table, groups and batch arithmetic, for `dtrain plan` and supervisor.log.
std::string to_text(const RankPlan& plan);
/// "world 8 = data 2 × pipeline 2 × tensor 2; global batch 64 = micro 8 × data 2 × grad_accum 4"
std::string summary_line(const RankPlan& plan);
/// One line in the plan-change vocabulary (launcher/base/plan_change.h): "shrunk from 6 to 4
/// ranks; host gpu02 excluded; data 3 → 2; grad_accum 2 → 3"; "no change" if equal.
std::string diff_text(const RankPlan& before, const RankPlan& after);

}  // namespace dtrain::plan
