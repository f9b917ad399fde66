#pragma once
// Internal to launcher/plan: slot capacity and the rank → host layout (rules 2–4 of
// rank_plan.h). make_plan decides how many replicas; these place them.

#include <string>
#include <vector>

#include "launcher/plan/rank_plan.h"

namespace dtrain::plan::detail {

/// A host that may run ranks, with its usable slot count.
struct Candidate {
  spec::HostEntry entry;
  int usable = 0;
};

/// How many slots each candidate offers to ranks.
struct Capacity {
  std::vector<int> per_host;  ///< parallel to the candidates
  int total = 0;
  int groups = 0;             ///< whole TP groups: total / tensor
  bool spanning = false;      ///< tensor exceeds every host's slots: TP groups cross hosts
};

/// only_slots.size() when the include filter chose slots, else slots, else slots_per_host.
int usable_slots(const spec::HostEntry& host, int slots_per_host);

/// Rule 3: whole TP groups per host when tensor fits in some host, else every slot, in order.
Capacity capacity(const std::vector<Candidate>& hosts, int tensor);

/// "gpu01 4, gpu02 4 of 6" (first hosts only when there are many), for error messages.
std::string describe_capacity(const std::vector<Candidate>& hosts, const Capacity& capacity);

/// Rule 4: ranks, hosts that run them, groups and layout notes; batch fields are left default.
RankPlan lay_out(const std::vector<Candidate>& hosts, const Capacity& capacity, int tensor,
                 int pipeline, int data);

}  // namespace dtrain::plan::detail
