// In-place recovery of the reference trainer (worker/trainer/live_recovery.h, training.h):
// the agreement's decisions on their own, then whole training runs with the ranks as threads of
// this process (Worker::in_process over InProcessKv, real Gloo groups). A "rank" is killed by
// closing its communicators mid-step; this test then plays the supervisor: it moves the store to
// the next generation (a fresh InProcessKv), announces it to the survivors (gen.changed) and
// starts a replacement with DTRAIN_JOIN_LIVE. The correctness requirement: with the world
// size restored, the final parameters are bit-identical to a fault-free run's.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/temp_dir.h"
#include "worker/runtime/worker.h"
#include "worker/trainer/live_recovery.h"
#include "worker/trainer/training.h"

using namespace dtrain::trainer;
using namespace std::chrono_literals;
namespace worker = dtrain::worker;

namespace {

/// Reports of a tensor 2 x data 2 world (rank = dp * 2 + tp), with the given completed steps.
std::vector<RankReport> tp2_dp2(std::vector<int64_t> completed, std::vector<int64_t> kept = {-1, -1, -1, -1}) {
  std::vector<RankReport> reports;
  for (int rank = 0; rank < 4; ++rank) {
    reports.push_back({rank, completed[static_cast<size_t>(rank)], kept[static_cast<size_t>(rank)], rank % 2, 0, rank / 2});
  }
  return reports;
}

}  // namespace

TEST_CASE("agreement: the oldest completed step wins, a rank one step ahead rolls back, the lowest live replica sends") {
  // Rank 2 is the replacement; rank 1 completed one step more than rank 0 (its allreduce
  // finished before the failure, rank 0's did not) and kept the state of step 9.
  auto reports = tp2_dp2({9, 10, -1, 9}, {8, 9, -1, 8});
  auto plan0 = plan_agreement(reports, 0);
  REQUIRE(plan0.ok());
  CHECK(plan0->step == 9);
  CHECK_FALSE(plan0->roll_back);
  CHECK(plan0->source_rank == 0);
  auto plan1 = plan_agreement(reports, 1);
  REQUIRE(plan1.ok());
  CHECK(plan1->roll_back);
  CHECK(plan1->source_rank == 1);
  auto plan2 = plan_agreement(reports, 2);  // the replacement takes tp 0's shard from rank 0
  REQUIRE(plan2.ok());
  CHECK(plan2->source_dp == 0);
  CHECK(plan2->source_rank == 0);
  // The replacement at dp 0: the state comes from dp 1.
  auto plan_dp0 = plan_agreement(tp2_dp2({-1, 9, 9, 9}), 0);
  REQUIRE(plan_dp0.ok());
  CHECK(plan_dp0->source_dp == 1);
  CHECK(plan_dp0->source_rank == 2);
  // A lost host takes two ranks with it (data 4, two replacements): both take rank 0's state.
  std::vector<RankReport> data4;
  for (int rank = 0; rank < 4; ++rank) data4.push_back({rank, rank < 2 ? 30 : -1, 29, 0, 0, rank});
  for (int rank : {2, 3}) {
    auto plan = plan_agreement(data4, rank);
    REQUIRE(plan.ok());
    CHECK(plan->step == 30);
    CHECK(plan->source_rank == 0);
  }
}

TEST_CASE("agreement: what cannot be recovered in place is an error that says why, on every rank alike") {
  auto too_far = tp2_dp2({9, 11, -1, 9}, {8, 10, -1, 8});
  for (int rank = 0; rank < 4; ++rank) {
    auto plan = plan_agreement(too_far, rank);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error().message.find("rank 1 completed step 11, more than one step after step 9") != std::string::npos);
    CHECK(plan.error().message.find("restarts every rank from the newest checkpoint") != std::string::npos);
  }
  auto nothing_kept = plan_agreement(tp2_dp2({9, 10, -1, 9}, {8, -1, -1, 8}), 0);
  REQUIRE_FALSE(nothing_kept.ok());
  CHECK(nothing_kept.error().message.find("rank 1 completed step 10 but kept no state of step 9") != std::string::npos);
  // Both replicas of tp 1's shard (ranks 1 and 3) are replacements.
  auto lost_shard = plan_agreement(tp2_dp2({9, -1, 9, -1}), 0);
  REQUIRE_FALSE(lost_shard.ok());
  CHECK(lost_shard.error().message.find("every replica of the shard tp 1 pp 0 (ranks 1,3) is a replacement") !=
        std::string::npos);
  auto nobody = plan_agreement(tp2_dp2({-1, -1, -1, -1}), 3);
  REQUIRE_FALSE(nobody.ok());
  CHECK(nobody.error().message.find("no rank has a state") != std::string::npos);
}

TEST_CASE("agreement: the kept state is the one before the last optimizer step") {
  KeptState kept;
  CHECK(kept.step() == -1);
  std::vector<float> params{1, 2}, velocity{3, 4};
  kept.keep(7, params, velocity);
  params = {5, 6};
  velocity = {7, 8};
  CHECK(kept.step() == 7);
  kept.restore_into(params, velocity);
  CHECK(params == std::vector<float>{1, 2});
  CHECK(velocity == std::vector<float>{3, 4});
  kept.forget();
  CHECK(kept.step() == -1);
}

namespace {

struct RankRun {
  int exit_code = -1;
  TrainingOutcome outcome;
};

struct Fault {
  int victim = -1;     ///< -1: a fault-free run
  int64_t step = 0;    ///< the victim dies in this step, before its data-parallel allreduce
};

Options small_run(int steps) {
  Options options;
  options.steps = steps;
  options.log_every = 0;
  options.comm_timeout_ms = 60'000;  // a failure is noticed by closed sockets, never by this
  return options;
}

/// Runs `tensor` x `data` ranks (rank = dp * tensor + tp, as the launcher orders them) as
/// threads; with a fault, plays the supervisor's part of an in-place recovery. Every rank's
/// result, by rank (the replacement's in the victim's place).
std::vector<RankRun> run_job(int tensor, int data, const Options& options, Fault fault, const std::string& ckpt_dir = "") {
  int world = tensor * data;
  auto store = std::make_shared<worker::InProcessKv>();
  worker::Settings settings;
  settings.backend = "gloo";
  settings.in_place = true;
  settings.in_place_timeout_ms = 60'000;
  settings.ckpt_dir = ckpt_dir;
  auto topology_of = [&](int rank) {
    worker::Topology topology;
    topology.rank = rank;
    topology.world_size = world;
    topology.tp_size = tensor;
    topology.dp_size = data;
    topology.tp_rank = rank % tensor;
    topology.dp_rank = rank / tensor;
    return topology;
  };
  std::vector<std::unique_ptr<worker::Worker>> workers;
  for (int rank = 0; rank < world; ++rank) workers.push_back(worker::Worker::in_process(topology_of(rank), settings, store));
  std::vector<RankRun> runs(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  auto start = [&](int rank) {
    threads.emplace_back([&, rank] {
      TrainingHooks hooks;
      hooks.die_before_reduce = [&, rank](int64_t step) { return rank == fault.victim && step == fault.step; };
      RankRun& run = runs[static_cast<size_t>(rank)];
      run.exit_code = train(*workers[static_cast<size_t>(rank)], options, hooks, &run.outcome);
    });
  };
  for (int rank = 0; rank < world; ++rank) start(rank);
  if (fault.victim >= 0) {
    threads[static_cast<size_t>(fault.victim)].join();  // the victim "exits"
    CHECK(runs[static_cast<size_t>(fault.victim)].exit_code == kKilledByHook);
    // The supervisor: store to generation 1, gen.changed to the survivors, a replacement.
    auto next_store = std::make_shared<worker::InProcessKv>();
    store->end_generation();
    for (int rank = 0; rank < world; ++rank) {
      if (rank != fault.victim) workers[static_cast<size_t>(rank)]->announce_generation(1, next_store);
    }
    worker::Settings replacement = settings;
    replacement.generation = 1;
    replacement.join_live = true;
    workers[static_cast<size_t>(fault.victim)] =
        worker::Worker::in_process(topology_of(fault.victim), replacement, next_store);
    std::thread joining([&, rank = fault.victim] {
      RankRun& run = runs[static_cast<size_t>(rank)];
      run.exit_code = train(*workers[static_cast<size_t>(rank)], options, {}, &run.outcome);
    });
    for (int rank = 0; rank < world; ++rank) {
      if (rank != fault.victim) threads[static_cast<size_t>(rank)].join();
    }
    joining.join();
  } else {
    for (std::thread& thread : threads) thread.join();
  }
  return runs;
}

/// Every rank finished; returns the checksums by rank.
std::vector<uint64_t> checksums(const std::vector<RankRun>& runs) {
  std::vector<uint64_t> sums;
  for (size_t rank = 0; rank < runs.size(); ++rank) {
    INFO("rank " << rank);
    CHECK(runs[rank].exit_code == 0);
    sums.push_back(runs[rank].outcome.checksum);
  }
  return sums;
}

}  // namespace

TEST_CASE("in-place recovery, data parallel 4: a rank killed mid-step, the final parameters are bit-identical") {
  Options options = small_run(40);
  std::vector<RankRun> fault_free = run_job(1, 4, options, {});
  std::vector<uint64_t> reference = checksums(fault_free);
  for (int victim : {3, 0}) {  // rank 0 too: then the replacement's state comes from rank 1
    CAPTURE(victim);
    std::vector<RankRun> recovered = run_job(1, 4, options, {victim, 17});
    CHECK(checksums(recovered) == reference);
    for (const RankRun& run : recovered) {
      CHECK(run.outcome.recoveries == 1);
      CHECK(run.outcome.roll_backs == 0);  // nobody completed step 17: the victim never reduced
      CHECK(run.outcome.loss == fault_free[0].outcome.loss);
    }
  }
}

TEST_CASE("in-place recovery, tensor 2 x data 2: survivors a step ahead roll back, the final parameters are bit-identical") {
  Options options = small_run(40);
  dtrain::testing::TempDir reference_dir, recovered_dir;
  options.ckpt_interval = 5;  // saves in flight around the failure must neither commit wrongly nor block
  std::vector<uint64_t> reference = checksums(run_job(2, 2, options, {}, reference_dir.path));
  CHECK(reference[0] != reference[1]);  // tp 0 and tp 1 hold different shards
  CHECK(reference[0] == reference[2]);  // replicas agree
  // Rank 2 (tp 0, dp 1) dies after its tensor-parallel work of step 23: rank 3 (its tensor
  // partner) and rank 1 complete step 23 in their own data-parallel group; rank 0 does not.
  std::vector<RankRun> recovered = run_job(2, 2, options, {2, 23}, recovered_dir.path);
  CHECK(checksums(recovered) == reference);
  CHECK(recovered[0].outcome.roll_backs == 0);
  CHECK(recovered[1].outcome.roll_backs == 1);
  CHECK(recovered[3].outcome.roll_backs == 1);
  CHECK(worker::latest_complete(recovered_dir.path).latest == std::optional<int64_t>(40));
}

TEST_CASE("in-place recovery without a surviving replica of a shard fails on every rank, saying why") {
  Options options = small_run(20);
  // tensor 2 x data 1: rank 1 holds the only copy of tp 1's shard.
  std::vector<RankRun> runs = run_job(2, 1, options, {1, 8});
  CHECK(runs[0].exit_code == 1);
  CHECK(runs[1].exit_code == 1);
}
