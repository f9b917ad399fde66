// Rank layout on the full host set: coordinates, placement, data auto, groups, batch, output.

#include <doctest/doctest.h>

#include <tuple>

#include "launcher/plan/rank_plan.h"
#include "tests/unit/plan_support.h"

using namespace dtrain;
using namespace dtrain::plan;
using dtrain::plan::testing::make_spec;

namespace {

// (host, local_rank, dp, pp, tp) of one rank.
using Where = std::tuple<std::string, int, int, int, int>;

Where where(const RankSlot& slot) { return {slot.host, slot.local_rank, slot.dp, slot.pp, slot.tp}; }

RankPlan plan_of(const spec::JobSpec& spec, const std::vector<std::string>& without = {}) {
  Result<RankPlan> plan = make_plan(spec, without);
  if (!plan) FAIL("make_plan failed: " << plan.error().message);
  return *plan;
}

}  // namespace

TEST_CASE("data 2 × pipeline 2 × tensor 2 on two 4-slot hosts: Megatron order, TP fastest") {
  RankPlan plan = plan_of(make_spec({"gpu01", "gpu02"}, 4, 2, 2, 2));
  REQUIRE(plan.world_size == 8);
  REQUIRE(plan.ranks.size() == 8);
  const std::vector<Where> expected = {
      {"gpu01", 0, 0, 0, 0}, {"gpu01", 1, 0, 0, 1}, {"gpu01", 2, 1, 0, 0}, {"gpu01", 3, 1, 0, 1},
      {"gpu02", 0, 0, 1, 0}, {"gpu02", 1, 0, 1, 1}, {"gpu02", 2, 1, 1, 0}, {"gpu02", 3, 1, 1, 1},
  };
  for (int rank = 0; rank < 8; ++rank) {
    CAPTURE(rank);
    CHECK(plan.ranks[rank].rank == rank);
    CHECK(where(plan.ranks[rank]) == expected[rank]);
    CHECK(plan.ranks[rank].host_index == rank / 4);
  }
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(plan.hosts[1].ranks == std::vector<int>{4, 5, 6, 7});
  CHECK(plan.hosts[1].slots_used == 4);
  CHECK(plan.notes.empty());
}

TEST_CASE("tensor 1, pipeline 1: data auto fills every slot of every host") {
  RankPlan plan = plan_of(make_spec({"a", "b", "c"}, 2, 1, 1, 0));
  CHECK(plan.data == 6);
  CHECK(plan.world_size == 6);
  const std::vector<Where> expected = {{"a", 0, 0, 0, 0}, {"a", 1, 1, 0, 0}, {"b", 0, 2, 0, 0},
                                       {"b", 1, 3, 0, 0}, {"c", 0, 4, 0, 0}, {"c", 1, 5, 0, 0}};
  for (int rank = 0; rank < 6; ++rank) CHECK(where(plan.ranks[rank]) == expected[rank]);
  CHECK(plan.grad_accum == 1);
  CHECK(plan.global_batch == 0);
}

TEST_CASE("pipeline 3 × data auto × tensor 2 on 3 hosts of 4 slots") {
  RankPlan plan = plan_of(make_spec({"h1", "h2", "h3"}, 4, 2, 3, 0));
  CHECK(plan.data == 2);  // 12 slots / (tensor 2 × pipeline 3)
  for (const RankSlot& slot : plan.ranks) {
    CAPTURE(slot.rank);
    CHECK(slot.rank == (slot.pp * plan.data + slot.dp) * plan.tensor + slot.tp);
    CHECK(slot.host == "h" + std::to_string(slot.pp + 1));  // one stage per host here
    CHECK(slot.local_rank == slot.rank % 4);
  }
}

TEST_CASE("a TP group stays inside a host: a 6-slot host with tensor 4 uses 4 slots") {
  RankPlan plan = plan_of(make_spec({"gpu01", "gpu02"}, 6, 4, 1, 0));
  CHECK(plan.data == 2);
  CHECK(plan.world_size == 8);
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[0].slots == 6);
  CHECK(plan.hosts[0].slots_used == 4);
  CHECK(plan.hosts[1].slots_used == 4);
  for (const std::vector<int>& group : plan.tp_groups) {
    CHECK(plan.ranks[group.front()].host == plan.ranks[group.back()].host);
  }
  CHECK(plan.ranks[4].host == "gpu02");
  CHECK(plan.ranks[4].local_rank == 0);
  REQUIRE(plan.notes.size() == 2);
  CHECK(plan.notes[0] == "gpu01 uses 4 of 6 slots: tensor=4 groups stay inside a host");
}

TEST_CASE("a host too small for one TP group runs nothing when another host can hold groups") {
  spec::JobSpec spec = make_spec({"small", "big"}, 4, 4, 1, 0);
  spec.hosts[0].slots = 2;
  RankPlan plan = plan_of(spec);
  CHECK(plan.data == 1);
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].entry.name == "big");
  CHECK(plan.ranks[0].host_index == 0);
  CHECK(plan.notes == std::vector<std::string>{"small runs no ranks: its 2 slots cannot hold a tensor=4 group"});
}

TEST_CASE("tensor larger than every host: TP groups span hosts, with a note") {
  RankPlan plan = plan_of(make_spec({"gpu01", "gpu02", "gpu03", "gpu04"}, 4, 8, 1, 0));
  CHECK(plan.data == 2);
  CHECK(plan.tp_groups == std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7},
                                                         {8, 9, 10, 11, 12, 13, 14, 15}});
  CHECK(plan.ranks[5].host == "gpu02");
  CHECK(plan.ranks[5].local_rank == 1);
  CHECK(plan.ranks[5].tp == 5);
  REQUIRE_FALSE(plan.notes.empty());
  CHECK(plan.notes[0].rfind("TP groups cross hosts: tensor=8 > 4 slots on gpu01", 0) == 0);
}

TEST_CASE("fixed data smaller than the hosts: later hosts run nothing, partial hosts are noted") {
  RankPlan plan = plan_of(make_spec({"a", "b", "c"}, 4, 2, 1, 3));
  CHECK(plan.world_size == 6);
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[1].slots_used == 2);
  CHECK(plan.notes == std::vector<std::string>{"b uses 2 of 4 slots: world 6 needs no more",
                                               "c runs no ranks: world 6 fills the hosts before it"});
}

TEST_CASE("include filter slots: LOCAL_RANK counts the used slots, slot keeps the GPU index") {
  spec::JobSpec spec = make_spec({"a", "b"}, 4, 1, 1, 0);
  spec.hosts[1].only_slots = {1, 3};
  RankPlan plan = plan_of(spec);
  CHECK(plan.world_size == 6);
  CHECK(plan.hosts[1].slots == 2);
  CHECK(where(plan.ranks[4]) == Where{"b", 0, 4, 0, 0});
  CHECK(plan.ranks[4].slot == 1);
  CHECK(plan.ranks[5].local_rank == 1);
  CHECK(plan.ranks[5].slot == 3);
  CHECK(plan.ranks[2].slot == 2);
}

TEST_CASE("per-host slots override slots_per_host") {
  spec::JobSpec spec = make_spec({"a", "b"}, 2, 1, 1, 0);
  spec.hosts[0].slots = 3;
  RankPlan plan = plan_of(spec);
  CHECK(plan.world_size == 5);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1, 2});
}

TEST_CASE("groups: tensor, pipeline and data groups hold the right ranks") {
  RankPlan plan = plan_of(make_spec({"gpu01", "gpu02"}, 4, 2, 2, 2));
  using Groups = std::vector<std::vector<int>>;
  CHECK(plan.tp_groups == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(plan.pp_groups == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(plan.dp_groups == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
}

TEST_CASE("a fixed data that needs more slots than the hosts have is refused with the numbers") {
  Result<RankPlan> plan = make_plan(make_spec({"gpu01", "gpu02", "gpu03"}, 4, 2, 2, 4));
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().kind == ErrorKind::user);
  const std::string& message = plan.error().message;
  CAPTURE(message);
  CHECK(message.find("needs 16 slots") != std::string::npos);
  CHECK(message.find("hold 12") != std::string::npos);
  CHECK(message.find("parallelism.data to 3") != std::string::npos);
}

TEST_CASE("one replica that does not fit is refused, naming tensor and pipeline") {
  Result<RankPlan> plan = make_plan(make_spec({"gpu01"}, 4, 4, 2, 0));
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("pipeline 2 × tensor 4 needs 8 slots") != std::string::npos);
  CHECK(plan.error().message.find("gpu01 4") != std::string::npos);
}

TEST_CASE("nonsense parallelism is a user error, not a crash") {
  CHECK_FALSE(make_plan(make_spec({"a"}, 4, 0, 1, 0)).ok());
  CHECK_FALSE(make_plan(make_spec({"a"}, 4, 1, -1, 0)).ok());
  CHECK_FALSE(make_plan(make_spec({"a"}, 4, 1, 1, -2)).ok());
  CHECK_FALSE(make_plan(make_spec({"a"}, 0, 1, 1, 0)).ok());
  CHECK_FALSE(make_plan(make_spec({}, 4, 1, 1, 0)).ok());
  Result<RankPlan> huge = make_plan(make_spec({"a"}, 4, 2, 2, 2147483647));
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().message.find("parallelism.data") != std::string::npos);
}

TEST_CASE("batch: micro × data × grad_accum = global") {
  spec::JobSpec spec = make_spec({"gpu01", "gpu02"}, 4, 2, 2, 2);
  spec.batch = {64, 8};
  RankPlan plan = plan_of(spec);
  CHECK(plan.global_batch == 64);
  CHECK(plan.micro_batch == 8);
  CHECK(plan.grad_accum == 4);

  spec.batch = {64, 0};  // micro unset: global / data, no accumulation
  plan = plan_of(spec);
  CHECK(plan.micro_batch == 32);
  CHECK(plan.grad_accum == 1);
}

TEST_CASE("batch arithmetic that does not divide is refused with batches that work") {
  spec::JobSpec spec = make_spec({"gpu01", "gpu02"}, 4, 1, 1, 0);  // data 8
  spec.batch = {100, 8};
  Result<RankPlan> plan = make_plan(spec);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message ==
        "batch.global: 100 is not a multiple of batch.micro 8 × data 8 = 64; set batch.global to "
        "a multiple of 64 (64 or 128), or change batch.micro");

  spec.batch = {100, 0};
  plan = make_plan(spec);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("does not split evenly over data 8") != std::string::npos);
  CHECK(plan.error().message.find("(96 or 104)") != std::string::npos);

  spec.batch = {32, 8};  // smaller than one step of micro × data
  plan = make_plan(spec);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("a multiple of 64 (64)") != std::string::npos);
}

TEST_CASE("to_json describes every field, and rank entries match the plan") {
  spec::JobSpec spec = make_spec({"gpu01", "gpu02"}, 4, 2, 2, 2);
  spec.hosts[1].user = "ml";
  spec.hosts[1].port = 2222;
  spec.batch = {64, 8};
  RankPlan plan = plan_of(spec);
  nlohmann::json json = to_json(plan);
  for (const char* key : {"world_size", "tensor", "pipeline", "data", "global_batch", "micro_batch",
                          "grad_accum", "hosts", "ranks", "groups", "without", "spares_used", "notes"})
    CHECK_MESSAGE(json.contains(key), key);
  CHECK(json["world_size"] == 8);
  CHECK(json["grad_accum"] == 4);
  CHECK(json["hosts"][1]["name"] == "gpu02");
  CHECK(json["hosts"][1]["user"] == "ml");
  CHECK(json["hosts"][1]["port"] == 2222);
  CHECK(json["hosts"][1]["slots"] == 4);
  CHECK(json["hosts"][1]["slots_used"] == 4);
  CHECK(json["hosts"][1]["ranks"] == nlohmann::json({4, 5, 6, 7}));
  CHECK(json["ranks"][6] == nlohmann::json({{"rank", 6}, {"host", "gpu02"}, {"host_index", 1},
                                            {"local_rank", 2}, {"slot", 2}, {"dp", 1}, {"pp", 1},
                                            {"tp", 0}}));
  CHECK(json["groups"]["dp"] == nlohmann::json({{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  CHECK(json["without"].is_array());
  CHECK(json["spares_used"].is_array());
}

TEST_CASE("to_text shows hosts, batch arithmetic, the rank table and groups") {
  spec::JobSpec spec = make_spec({"gpu01", "gpu02"}, 4, 2, 2, 2);
  spec.batch = {64, 8};
  std::string text = to_text(plan_of(spec));
  CAPTURE(text);
  CHECK(text.rfind("hosts: 2 (gpu01 4/4 slots, gpu02 4/4 slots)\n", 0) == 0);
  CHECK(text.find("world 8 = data 2 × pipeline 2 × tensor 2; global batch 64 = micro 8 × data 2 × "
                  "grad_accum 4\n") != std::string::npos);
  CHECK(text.find("rank  host   local  device   dp   pp   tp\n") != std::string::npos);
  CHECK(text.find("   6  gpu02      2       2    1    1    0\n") != std::string::npos);
  CHECK(text.find("tensor groups: [0,1] [2,3] [4,5] [6,7]\n") != std::string::npos);
  CHECK(text.find("data groups: [0,2] [1,3] [4,6] [5,7]\n") != std::string::npos);
  CHECK(text.find("notes:") == std::string::npos);
}
