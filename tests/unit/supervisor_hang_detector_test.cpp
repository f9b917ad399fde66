// HangDetector alone: scripted beats on a scripted clock (plain milliseconds), no supervisor.

#include <doctest/doctest.h>

#include "launcher/supervisor/hang_detector.h"

using namespace dtrain;
using namespace dtrain::supervisor;

namespace {

// hang_timeout 20 s, checkpoint_timeout 60 s, beats every 500 ms.
constexpr HangLimits kLimits{20'000, 60'000, 500};

/// `count` running ranks of a generation started at 0, and their beats.
struct Ranks {
  explicit Ranks(size_t count) : status(count) {
    for (RankStatus& rank : status) rank.state = RankState::running;
  }
  /// A beat of `rank` at `now`: its step, as the supervisor records it (the time moves only
  /// when the step changes).
  void beat(int rank, int64_t step, int64_t now) {
    RankStatus& r = status[static_cast<size_t>(rank)];
    if (r.step != step) {
      r.step = step;
      r.step_changed_ms = now;
    }
  }
  void phase(int rank, bool in_checkpoint, int64_t now) {
    RankStatus& r = status[static_cast<size_t>(rank)];
    r.in_checkpoint = in_checkpoint;
    r.phase_changed_ms = now;
  }
  std::vector<RankStatus> status;
};

}  // namespace

TEST_CASE("a rank whose step stops is seen hung once past hang_timeout, and not before") {
  Ranks ranks(2);
  HangDetector detector(kLimits, 0);
  int64_t now = 0;
  for (int64_t step = 0; now <= 60'000; now += 500) {
    ranks.beat(0, step++, now);   // rank 0 trains on
    if (now <= 10'000) ranks.beat(1, now / 500, now);  // rank 1 stops at 10 s
    HangCheck check = detector.check(ranks.status, now);
    if (now <= 30'000) {  // 10 s + hang_timeout
      CHECK_MESSAGE(!check.hang, "hang reported at " << now);
      continue;
    }
    REQUIRE(check.hang);
    CHECK(check.hang->rank == 1);
    CHECK(check.hang->silent_ms == now - 10'000);
    CHECK(check.hang->limit_ms == 20'000);
    CHECK(check.hang->overdue_ms == now - 30'000);
    CHECK(!check.hang->in_save);
    break;
  }
  CHECK(now == 30'500);
}

TEST_CASE("a slow rank that still advances is never hung, however long its steps take") {
  Ranks ranks(2);
  HangDetector detector(kLimits, 0);
  for (int64_t now = 0; now <= 300'000; now += 500) {
    ranks.beat(0, now / 19'000, now);  // one step every 19 s: under hang_timeout (20 s)
    ranks.beat(1, now / 19'000, now);
    HangCheck check = detector.check(ranks.status, now);
    REQUIRE_MESSAGE(!check.hang, "hang reported at " << now);
    CHECK(check.unwatched.empty());
  }
}

TEST_CASE("a rank that reports no step is not watched, said once, and watched once it beats") {
  Ranks ranks(3);
  HangDetector detector(kLimits, 0);
  int64_t now = 0;
  for (; now <= 20'000; now += 500) {
    ranks.beat(0, now / 500, now);
    CHECK(detector.check(ranks.status, now).unwatched.empty());
  }
  // hang_timeout after the start, ranks 1 and 2 still have no step: named once.
  ranks.beat(0, now / 500, now);
  HangCheck first = detector.check(ranks.status, now);
  CHECK(first.unwatched == std::vector<int>{1, 2});
  CHECK(!first.hang);
  for (int i = 0; i < 200; ++i) {  // silent ranks are never blamed, and never named again
    now += 500;
    ranks.beat(0, now / 500, now);
    HangCheck check = detector.check(ranks.status, now);
    CHECK(check.unwatched.empty());
    CHECK(check.watched_again.empty());
    REQUIRE(!check.hang);
  }
  // Rank 2 beats with a step: watched from now on, said once.
  ranks.beat(2, 7, now);
  CHECK(detector.check(ranks.status, now).watched_again == std::vector<int>{2});
  now += 500;
  ranks.beat(0, now / 500, now);
  CHECK(detector.check(ranks.status, now).watched_again.empty());
  // ... and hung once its step stays 7 for hang_timeout.
  int64_t beat_at = now - 500;
  for (now += 500; now <= beat_at + 20'000; now += 500) {
    ranks.beat(0, now / 500, now);
    REQUIRE(!detector.check(ranks.status, now).hang);
  }
  ranks.beat(0, now / 500, now);
  HangCheck hung = detector.check(ranks.status, now);
  REQUIRE(hung.hang);
  CHECK(hung.hang->rank == 2);
}

TEST_CASE("while a rank saves a checkpoint only it is watched, with checkpoint_timeout") {
  Ranks ranks(2);
  HangDetector detector(kLimits, 0);
  ranks.beat(0, 10, 0);
  ranks.beat(1, 10, 0);
  ranks.phase(0, true, 1'000);  // rank 0 saves; rank 1 waits for it, its step unchanged
  for (int64_t now = 1'000; now <= 61'000; now += 500) {
    REQUIRE_MESSAGE(!detector.check(ranks.status, now).hang, "hang reported at " << now);
  }
  HangCheck check = detector.check(ranks.status, 61'500);
  REQUIRE(check.hang);
  CHECK(check.hang->rank == 0);
  CHECK(check.hang->in_save);
  CHECK(check.hang->limit_ms == 60'000);
}

TEST_CASE("the end of a save restarts every rank's quiet time") {
  Ranks ranks(2);
  HangDetector detector(kLimits, 0);
  ranks.beat(0, 10, 0);
  ranks.beat(1, 10, 0);
  ranks.phase(0, true, 1'000);
  ranks.phase(0, false, 50'000);
  detector.save_ended(50'000);
  CHECK(!detector.check(ranks.status, 70'000).hang);  // rank 1 quiet 70 s, but only 20 s since the save
  HangCheck check = detector.check(ranks.status, 70'500);
  REQUIRE(check.hang);
  CHECK(check.hang->rank == 0);  // same step, same quiet time: the lower rank
}

TEST_CASE("among ranks silent about as long, a rank the agent saw stopped is blamed first") {
  Ranks ranks(3);
  HangDetector detector(kLimits, 0);
  ranks.beat(0, 5, 0);
  ranks.beat(1, 5, 600);  // beat a moment later (inside 2 × interval), and it is the stopped one
  ranks.beat(2, 9, 0);
  ranks.status[1].seen_stopped = true;
  HangCheck check = detector.check(ranks.status, 20'100);
  REQUIRE(check.hang);
  CHECK(check.hang->rank == 1);
  CHECK(check.hang->overdue_ms == 100);
}
