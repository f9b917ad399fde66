// RankProgressTable: the beats' per-rank progress and the four per-rank views built from it
// (state.json rows, metrics.jsonl's line, the console status, the Prometheus ranks), over a real
// supervisor whose ranks stepped.

#include <doctest/doctest.h>

#include "launcher/base/clock.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/run/rank_progress.h"
#include "tests/unit/plan_support.h"

using namespace dtrain;
using namespace dtrain::run;

namespace {

/// A supervisor running generation 0 of `hosts` × 2 ranks, every worker started.
struct Running {
  explicit Running(int hosts) : spec(make(hosts)), plan(*plan::make_plan(spec)), supervisor(spec, plan, clock) {
    for (const spec::HostEntry& host : spec.hosts) supervisor.on_event(supervisor::HostConnected{host.name});
    REQUIRE(supervisor.generation() == 0);
    supervisor.on_event(supervisor::GenerationSpawned{0});
    for (const plan::RankSlot& slot : plan.ranks) {
      supervisor.on_event(supervisor::WorkerStarted{0, slot.rank, 100 + slot.rank});
    }
    progress.reset(plan.ranks.size());
  }
  static spec::JobSpec make(int hosts) {
    std::vector<std::string> names;
    for (int i = 1; i <= hosts; ++i) names.push_back("h" + std::to_string(i));
    spec::JobSpec spec = plan::testing::make_spec(names, 2, 1, 1, 2 * hosts);
    spec.worker.command = {"train"};
    return spec;
  }
  /// Rank `rank` beats `step` (the table and the supervisor, as the router does).
  void beat(int rank, int64_t step, proto::WorkerBeat beat) {
    beat.step = step;
    progress.beat(rank, beat, clock.wall_ms());
    supervisor.on_event(supervisor::WorkerProgress{0, rank, step, std::nullopt});
  }

  FakeClock clock;
  spec::JobSpec spec;
  plan::RankPlan plan;
  supervisor::Supervisor supervisor;
  RankProgressTable progress;
};

proto::WorkerBeat with(std::optional<double> loss, std::optional<double> step_ms, std::optional<double> comm_ms = {},
                       std::optional<int64_t> samples = {}) {
  proto::WorkerBeat beat;
  beat.metrics.loss = loss;
  beat.metrics.step_ms = step_ms;
  beat.metrics.comm_ms = comm_ms;
  beat.metrics.samples = samples;
  return beat;
}

}  // namespace

TEST_CASE("one rank's beat shows in all four views, the others' silence too") {
  Running run(2);
  run.beat(2, 5, with(0.75, 20.0, 5.0, 64));

  std::vector<RunSnapshot::Rank> rows = run.progress.state_rows(run.supervisor);
  REQUIRE(rows.size() == 4);
  CHECK(rows[2].rank == 2);
  CHECK(rows[2].host == "h2");
  CHECK(rows[2].local_rank == 0);
  CHECK(rows[2].step == std::optional<int64_t>(5));
  CHECK(rows[2].metrics.loss == std::optional<double>(0.75));
  CHECK(rows[2].metrics.step_ms == std::optional<double>(20.0));
  CHECK(rows[2].metrics.comm_ms == std::optional<double>(5.0));
  CHECK(rows[2].last_beat_ms == std::optional<int64_t>(run.clock.wall_ms()));
  CHECK_FALSE(rows[1].last_beat_ms);  // never beat: null in state.json
  CHECK_FALSE(rows[1].step);
  CHECK(rows[1].pid == std::optional<int64_t>(101));
  CHECK_FALSE(rows[1].exit);
  CHECK_FALSE(rows[1].metrics.loss);

  std::optional<nlohmann::json> line = run.progress.metrics_line(run.supervisor, 64);
  REQUIRE(line);
  REQUIRE((*line)["ranks"].size() == 1);  // only ranks that stepped
  // comm_ms too (the step split reads it from metrics.jsonl); samples is not a metrics-line field.
  CHECK((*line)["ranks"][0] == nlohmann::json{{"rank", 2}, {"step", 5}, {"loss", 0.75}, {"step_ms", 20.0}, {"comm_ms", 5.0}});

  ConsoleStatus status = run.progress.console_status(run.supervisor);
  CHECK(status.step == 5);
  CHECK(status.has_loss);
  CHECK(status.loss == 0.75);
  CHECK(status.world_size == 4);
  CHECK(status.workers_running == 4);

  metrics::StragglerDetector stragglers({1.5});
  std::vector<metrics::RankTaskMetrics> prometheus = run.progress.task_metric_rows(run.supervisor, stragglers);
  REQUIRE(prometheus.size() == 4);
  CHECK(prometheus[2].step == 5);
  CHECK(prometheus[2].metrics.loss == std::optional<double>(0.75));
  CHECK(prometheus[2].metrics.step_ms == std::optional<double>(20.0));
  CHECK(prometheus[2].metrics.comm_ms == std::optional<double>(5.0));
  CHECK(prometheus[2].samples_per_second == std::optional<double>(3200.0));
  CHECK_FALSE(prometheus[0].metrics.loss);
  CHECK(prometheus[0].step == -1);
}

TEST_CASE("no metrics line before any rank stepped, and a rank replaced in place starts from nothing") {
  Running run(1);
  CHECK_FALSE(run.progress.metrics_line(run.supervisor, 64));
  run.beat(0, 3, with(1.5, 10.0));
  run.progress.hello(1);
  CHECK(run.progress.find(1)->speaks_protocol);
  CHECK(run.progress.fastest_step_ms(run.supervisor) == 10.0);
  run.progress.reset_rank(0);
  CHECK_FALSE(run.progress.find(0)->metrics.loss);
  CHECK(run.progress.fastest_step_ms(run.supervisor) == 0.0);
  CHECK_FALSE(run.progress.find(7));
}

TEST_CASE("past the detail limit the metrics line is the spread and the ranks that lag, worst first") {
  Running run(3);  // 6 ranks, detail limit 2
  for (int rank = 0; rank < 6; ++rank) run.beat(rank, rank == 4 ? 7 : 10, with(1.0, rank == 1 ? 50.0 : 10.0));
  std::optional<nlohmann::json> line = run.progress.metrics_line(run.supervisor, 2);
  REQUIRE(line);
  CHECK_FALSE(line->contains("ranks"));
  CHECK((*line)["ranks_reporting"] == 6);
  CHECK((*line)["step"]["max"] == 10.0);
  CHECK((*line)["outliers_total"] == 2);  // rank 4 lags, rank 1 is slow
  REQUIRE((*line)["outliers"].size() == 2);
  CHECK((*line)["outliers"][0]["rank"] == 4);
  CHECK((*line)["outliers"][1]["rank"] == 1);
}

TEST_CASE("straggler samples are each stepping rank's own work: its step less its time in collectives") {
  Running run(1);
  run.beat(0, 4, with(std::nullopt, 30.0, 20.0));
  run.beat(1, 4, with(std::nullopt, 30.0));
  metrics::StragglerDetector stragglers({1.5});
  stragglers.reset(2);
  run.progress.add_straggler_samples(run.supervisor, stragglers);
  // Not enough samples for a verdict, but each rank's window holds one.
  CHECK(stragglers.evaluate().empty());
  for (int i = 0; i < 20; ++i) {
    run.beat(0, 5 + i, with(std::nullopt, 30.0, 20.0));
    run.beat(1, 5 + i, with(std::nullopt, 30.0));
    run.progress.add_straggler_samples(run.supervisor, stragglers);
  }
  stragglers.evaluate();
  CHECK(stragglers.median_ms(0) == std::optional<double>(10.0));
  CHECK(stragglers.median_ms(1) == std::optional<double>(30.0));
}
