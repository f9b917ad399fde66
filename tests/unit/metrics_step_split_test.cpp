// The step split (launcher/metrics/step_split.h): each rank's step into waiting for input,
// collectives and compute; the bottleneck by share of rank time; the rank the others wait for;
// and the Prometheus families built on it.

#include <doctest/doctest.h>

#include "launcher/metrics/step_split.h"
#include "launcher/metrics/task_metrics.h"

using namespace dtrain;
using metrics::StepPart;

namespace {

contract::BeatMetrics beat(double step_ms, std::optional<double> data_ms, std::optional<double> comm_ms) {
  return {.step_ms = step_ms, .comm_ms = comm_ms, .data_ms = data_ms};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("step split: a slow input pipeline is named data reading") {
  metrics::StepSplitBuilder builder;
  for (int sample = 0; sample < 3; ++sample) {
    for (int rank = 0; rank < 4; ++rank) builder.add(rank, beat(100, 70 + sample, 5));
  }
  metrics::StepSplit split = builder.build();
  REQUIRE(split.bottleneck);
  CHECK(*split.bottleneck == StepPart::data);
  CHECK_FALSE(split.waited_for);
  CHECK(split.mean.data_ms == doctest::Approx(71));
  CHECK(split.mean.compute_ms == doctest::Approx(24));
  CHECK(split.share(StepPart::data) == doctest::Approx(0.71));
  CHECK(contains(split.verdict(), "Data reading: ranks wait for input 71% of the step"));
  CHECK(contains(split.verdict(), "DataLoader"));
}

TEST_CASE("step split: one slow peer makes the others wait in collectives, and is named") {
  metrics::StepSplitBuilder builder;
  for (int rank = 0; rank < 3; ++rank) builder.add(rank, beat(310, 0, 300));  // waiting for rank 3
  builder.add(3, beat(310, 0, 2));                                             // its own work: 308 ms
  metrics::StepSplit split = builder.build();
  REQUIRE(split.bottleneck);
  CHECK(*split.bottleneck == StepPart::communication);
  REQUIRE(split.waited_for);
  CHECK(*split.waited_for == 3);
  CHECK(contains(split.verdict(), "Communication: rank 3's own work takes 308 ms a step against a median of 10.0 ms"));
  CHECK(contains(split.verdict(), "mostly compute"));
}

TEST_CASE("step split: balanced ranks in slow collectives blame the collectives, not a rank") {
  metrics::StepSplitBuilder builder;
  for (int rank = 0; rank < 4; ++rank) builder.add(rank, beat(100, 1, 80 + rank));
  metrics::StepSplit split = builder.build();
  REQUIRE(split.bottleneck);
  CHECK(*split.bottleneck == StepPart::communication);
  CHECK_FALSE(split.waited_for);
  CHECK(contains(split.verdict(), "the collectives themselves are slow"));
}

TEST_CASE("step split: two ranks, one slow, read as uneven compute with the slow rank named") {
  metrics::StepSplitBuilder builder;
  builder.add(0, beat(200, 0, 190));
  builder.add(1, beat(200, 0, 1));
  metrics::StepSplit split = builder.build();
  REQUIRE(split.bottleneck);
  CHECK(*split.bottleneck == StepPart::compute);
  REQUIRE(split.waited_for);
  CHECK(*split.waited_for == 1);
  CHECK(contains(split.verdict(), "Compute, unevenly: rank 1's own work"));
}

TEST_CASE("step split: nothing to split without data_ms or comm_ms, and bad samples are skipped") {
  metrics::StepSplitBuilder builder;
  builder.add(0, beat(100, std::nullopt, std::nullopt));
  builder.add(1, {.loss = 1.0});  // no step time: not a sample
  builder.add(2, beat(-5, 1, 1));
  builder.add(3, beat(std::nan(""), 1, 1));
  metrics::StepSplit split = builder.build();
  CHECK(split.ranks.size() == 1);
  CHECK_FALSE(split.bottleneck);
  CHECK(contains(split.verdict(), "cannot be split"));
  CHECK(metrics::StepSplitBuilder{}.build().ranks.empty());
}

TEST_CASE("step split: parts that overrun the step leave compute at 0, never negative") {
  metrics::StepSplitBuilder builder;
  builder.add(0, beat(50, 40, 30));
  metrics::StepSplit split = builder.build();
  CHECK(split.ranks[0].parts.step_ms == doctest::Approx(70));
  CHECK(split.ranks[0].parts.compute_ms == doctest::Approx(0));
  CHECK(*split.bottleneck == StepPart::data);
}

TEST_CASE("Prometheus: the step's parts, the bottleneck as a state set, each rank's compute") {
  metrics::TaskSnapshot snapshot;
  snapshot.run_id = "r";
  for (int rank = 0; rank < 2; ++rank) {
    metrics::RankTaskMetrics row;
    row.rank = rank;
    row.host = "h";
    row.step = 5;
    row.metrics = beat(200, 150, 10);
    snapshot.ranks.push_back(row);
  }
  std::string text = metrics::render_prometheus(snapshot);
  CHECK(contains(text, "dtrain_step_part_seconds{run=\"r\",part=\"data\"} 0.15\n"));
  CHECK(contains(text, "dtrain_step_part_seconds{run=\"r\",part=\"compute\"} 0.04\n"));
  CHECK(contains(text, "dtrain_step_bottleneck{run=\"r\",part=\"data\"} 1\n"));
  CHECK(contains(text, "dtrain_step_bottleneck{run=\"r\",part=\"communication\"} 0\n"));
  CHECK(contains(text, "dtrain_rank_compute_seconds{run=\"r\",host=\"h\",rank=\"1\"} 0.04\n"));

  for (metrics::RankTaskMetrics& row : snapshot.ranks) row.metrics = beat(200, std::nullopt, std::nullopt);
  text = metrics::render_prometheus(snapshot);
  CHECK_FALSE(contains(text, "dtrain_step_bottleneck{"));  // no split without the parts: nothing claimed
  CHECK_FALSE(contains(text, "dtrain_rank_compute_seconds{"));
}
