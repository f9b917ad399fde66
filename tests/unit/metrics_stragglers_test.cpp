// Straggler scores: the fastest rank's median work time over each rank's, a detection once per
// rank and generation below the threshold, a clear once when it keeps up again, and a fresh
// start in the next generation.

#include <doctest/doctest.h>

#include "launcher/metrics/stragglers.h"

using namespace dtrain;

TEST_CASE("a rank twice as slow as the fastest is detected once, then cleared once") {
  metrics::StragglerDetector detector({0.75, 10, 5, 5});
  detector.reset(4);
  int64_t step = 0;
  auto run_steps = [&](int count, double slow_ms) {
    std::vector<metrics::StragglerChange> changes;
    for (int i = 0; i < count; ++i) {
      ++step;
      for (int rank = 0; rank < 4; ++rank) detector.add(rank, step, rank == 2 ? slow_ms : 100 + rank);
      for (const auto& change : detector.evaluate()) changes.push_back(change);
    }
    return changes;
  };
  CHECK(run_steps(4, 200).empty());  // fewer than 5 samples: not scored yet
  CHECK(!detector.score(0));
  std::vector<metrics::StragglerChange> changes = run_steps(10, 200);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].detected);
  CHECK(changes[0].rank == 2);
  CHECK(changes[0].median_ms == doctest::Approx(200));
  CHECK(changes[0].fastest_median_ms == doctest::Approx(100));
  CHECK(changes[0].score == doctest::Approx(0.5));
  CHECK(detector.is_straggler(2));
  CHECK(detector.stragglers() == 1);
  CHECK(*detector.score(0) == doctest::Approx(1.0));
  CHECK(*detector.score(3) == doctest::Approx(100.0 / 103));

  detector.add(2, step, 50);  // a repeated step is no new sample
  CHECK(detector.evaluate().empty());

  changes = run_steps(10, 101);  // the window fills with normal times
  REQUIRE(changes.size() == 1);
  CHECK(!changes[0].detected);
  CHECK(changes[0].rank == 2);
  CHECK(detector.stragglers() == 0);
  CHECK(run_steps(10, 300).empty());  // detected once per generation only
  CHECK(detector.is_straggler(2));     // ... though it shows as one

  detector.reset(4);
  step = 0;
  CHECK(detector.stragglers() == 0);
  changes = run_steps(6, 300);
  REQUIRE(changes.size() == 1);  // a new generation reports again
  CHECK(changes[0].score == doctest::Approx(1.0 / 3));
}

TEST_CASE("alike ranks and out-of-range input make no stragglers") {
  metrics::StragglerDetector detector;
  detector.reset(2);
  for (int64_t step = 1; step <= 30; ++step) {
    detector.add(0, step, 100);
    detector.add(1, step, 110);
    detector.add(5, step, 1000);  // no such rank
    detector.add(-1, step, 1000);
    CHECK(detector.evaluate().empty());
  }
  CHECK(detector.stragglers() == 0);
  CHECK(!detector.score(5));
}

TEST_CASE("work under the noise floor is never a straggler, far above it is") {
  metrics::StragglerDetector detector({0.75, 10, 5, 5});
  detector.reset(3);
  for (int64_t step = 1; step <= 10; ++step) {
    detector.add(0, step, 0.08);  // waits in the all-reduce for the others: little work of its own
    detector.add(1, step, 0.3);
    detector.add(2, step, 30);    // DTRAIN_FAULT_SLOW_RANK=2:30
  }
  std::vector<metrics::StragglerChange> changes = detector.evaluate();
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].rank == 2);
  CHECK(changes[0].score == doctest::Approx(5.0 / 30));
  CHECK(*detector.score(1) == 1.0);
}
