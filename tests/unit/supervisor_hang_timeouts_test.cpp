// HangTimeouts (an auto heartbeat.hang_timeout) with the HangDetector it feeds, on a scripted clock
// (plain milliseconds): the timeouts a run's own step times set, and what they detect.

#include <doctest/doctest.h>

#include "launcher/supervisor/hang_timeouts.h"

using namespace dtrain;
using namespace dtrain::supervisor;

namespace {

using Changed = events::HangTimeoutChanged;

spec::JobSpec auto_spec(int64_t interval_ms) {
  spec::JobSpec spec;
  spec.heartbeat.interval = Millis(interval_ms);
  return spec;  // hang_timeout, checkpoint_timeout and progress_window: auto
}

/// One generation of `world` ranks as the supervisor watches it: beats change steps and phases,
/// the timeouts learn from them and the detector gets the limits in force, as Supervisor does.
struct Watch {
  Watch(const spec::JobSpec& spec, size_t world) : timeouts(spec) { start(0, world, 0); }
  void start(int gen, size_t world, int64_t now) {
    ranks.assign(world, RankStatus{});
    for (RankStatus& rank : ranks) rank.state = RankState::running;
    started_ms = now;
    timeouts.new_generation(gen, world);
    detector = HangDetector(timeouts.limits(), now);
    take();
  }
  void beat(int rank, int64_t step, int64_t now) {
    RankStatus& r = ranks[static_cast<size_t>(rank)];
    if (r.step == step) return;
    timeouts.step_changed(rank, now - std::max(detector.quiet_since(r), started_ms));
    r.step = step;
    r.step_changed_ms = now;
    take();
  }
  void save(int rank, bool in_checkpoint, int64_t now) {
    RankStatus& r = ranks[static_cast<size_t>(rank)];
    if (!in_checkpoint) timeouts.save_took(now - r.phase_changed_ms);
    r.in_checkpoint = in_checkpoint;
    r.phase_changed_ms = now;
    if (!in_checkpoint) detector.save_ended(now);
    take();
  }
  void take() {
    detector.set_limits(timeouts.limits());
    if (auto change = timeouts.take_change()) changes.push_back(*change);
  }
  std::optional<Hang> check(int64_t now, bool maybe_host_loss = false) {
    return detector.check(ranks, now, maybe_host_loss).hang;
  }
  HangTimeouts timeouts;
  HangDetector detector;
  std::vector<RankStatus> ranks;
  int64_t started_ms = 0;
  std::vector<Changed> changes;  ///< hang_timeout.changed as the supervisor would record them
};

}  // namespace

TEST_CASE("auto: 1 minute while a generation warms up, then 5 x the longest step, never below the floor") {
  Watch watch(auto_spec(1000), 1);
  CHECK(watch.timeouts.automatic());
  CHECK(watch.timeouts.limits().hang_timeout_ms == 60'000);
  REQUIRE(watch.changes.size() == 1);  // the warm-up value, recorded as the generation starts
  CHECK(watch.changes[0].basis == Changed::kWarmUp);
  CHECK(watch.changes[0].progress_window_ms == 120'000);
  CHECK(watch.changes[0].checkpoint_timeout_ms == 600'000);
  int64_t now = 10'000;  // a slow first step (imports, compilation): warm-up, not counted
  watch.beat(0, 1, now);
  for (int step = 2; step <= HangTimeouts::kWarmupSteps + HangTimeouts::kSamples - 1; ++step) {
    now += 2'000;
    watch.beat(0, step, now);
    CHECK(watch.timeouts.limits().hang_timeout_ms >= 60'000);  // still warming up
  }
  now += 2'000;
  watch.beat(0, HangTimeouts::kWarmupSteps + HangTimeouts::kSamples, now);
  CHECK(watch.timeouts.limits().hang_timeout_ms == 10'000);  // 5 x 2 s
  Changed in_force = watch.timeouts.in_force();
  CHECK(in_force.basis == Changed::kStepTime);
  CHECK(in_force.longest_step_ms == 2'000);
  CHECK(in_force.progress_window_ms == 20'000);
  CHECK(in_force.checkpoint_timeout_ms == 600'000);
  CHECK(in_force.text() == "10s auto (5 x longest step 2s); checkpoint save 10m, progress window 20s");
  REQUIRE(watch.changes.size() == 2);  // leaving warm-up is recorded, the steps before it are not
  CHECK(watch.changes[1] == in_force);

  // Short steps: the floor, max(1 s, 5 heartbeat intervals).
  Watch fast(auto_spec(1000), 1);
  for (int step = 1; step <= 20; ++step) fast.beat(0, step, step * 100);
  CHECK(fast.timeouts.limits().hang_timeout_ms == 5'000);
  CHECK(fast.timeouts.in_force().basis == Changed::kFloor);
  CHECK(fast.timeouts.in_force().text() ==
        "5s auto (floor; 5 x longest step 100ms is less); checkpoint save 10m, progress window 10s");
}

TEST_CASE("auto: a stopped rank of a job whose steps take 50 ms is found within 2 s") {
  // Beats every 50 ms (heartbeat.interval), as the supervisor sees them: a step change every
  // 50 or 100 ms (the worker's rate limit, then its agent's beat). No timeout in the spec.
  Watch watch(auto_spec(50), 2);
  int64_t now = 0;
  int64_t step = 0;
  for (int tick = 0; tick < 200; ++tick) {  // 10 s of training
    now += tick % 3 == 0 ? 100 : 50;
    ++step;
    watch.beat(0, step, now);
    watch.beat(1, step, now);
    CHECK(!watch.check(now));
  }
  // The floor, 1 s: 5 x the longest interval (100 ms) is less.
  CHECK(watch.timeouts.limits().hang_timeout_ms == 1'000);
  CHECK(watch.changes.back().basis == Changed::kFloor);
  CHECK(watch.changes.back().hang_timeout_ms == 1'000);
  // Rank 1 is SIGSTOPped; rank 0 goes on (or blocks in its next collective: the same).
  const int64_t stopped_at = now;
  std::optional<Hang> hang;
  while (!hang && now < stopped_at + 10'000) {
    now += 100;  // the driver's tick
    watch.beat(0, ++step, now);
    hang = watch.check(now);
  }
  REQUIRE(hang);
  CHECK(hang->rank == 1);
  CHECK(hang->limit_ms == 1'000);
  CHECK(now - stopped_at <= 2'000);
}

TEST_CASE("auto: a job whose steps take 20 s is not declared hung, a stopped rank of it is, after 5 x its step") {
  Watch watch(auto_spec(1000), 2);
  int64_t now = 0;
  // The first step compiles for 50 s; then 20 s steps, seen a beat (up to 1 s) late, and a
  // checkpoint save of 3 minutes every 50 steps.
  int64_t next_step_at = 50'000;
  int64_t step = 0;
  int saves = 0;
  while (step < 300) {
    now += 500;  // ticks
    if (now >= next_step_at) {
      ++step;
      for (int rank = 0; rank < 2; ++rank) watch.beat(rank, step, now + (step % 2) * 1'000 * rank);
      next_step_at = now + 20'000;
      if (step % 50 == 0) {
        ++saves;
        for (int rank = 0; rank < 2; ++rank) watch.save(rank, true, now);
        for (int waited = 0; waited < 180'000; waited += 500) {
          now += 500;
          REQUIRE(!watch.check(now));
        }
        for (int rank = 0; rank < 2; ++rank) watch.save(rank, false, now);
        next_step_at = now + 20'000;
      }
    }
    REQUIRE(!watch.check(now));
  }
  CHECK(saves == 6);
  // 5 x the longest interval seen (21 s: a step and a late beat).
  CHECK(watch.timeouts.limits().hang_timeout_ms == 105'000);
  CHECK(watch.timeouts.in_force().longest_save_ms == 180'000);
  CHECK(watch.timeouts.limits().checkpoint_timeout_ms == 900'000);  // 5 x 3 min
  // Rank 1 stops: found once quiet for the limit in force, not before.
  const int64_t last_step_at = now;
  std::optional<Hang> hang;
  while (!hang && now < last_step_at + 400'000) {
    now += 500;
    if (now >= next_step_at) {
      watch.beat(0, ++step, now);
      next_step_at = now + 20'000;
    }
    hang = watch.check(now);
  }
  REQUIRE(hang);
  CHECK(hang->rank == 1);
  CHECK(hang->limit_ms == 105'000);
  CHECK(now - watch.detector.quiet_since(watch.ranks[1]) > 105'000);
  CHECK(now - watch.detector.quiet_since(watch.ranks[1]) <= 105'500);
}

TEST_CASE("auto: the estimate only grows, carries to the next generation, which warms up again") {
  Watch watch(auto_spec(100), 1);
  int64_t now = 0;
  for (int step = 1; step <= 20; ++step) watch.beat(0, step, now += 1'000);
  CHECK(watch.timeouts.limits().hang_timeout_ms == 5'000);
  watch.beat(0, 21, now += 1'200);  // 20 % longer: in force at once, not recorded (under 25 %)
  CHECK(watch.timeouts.limits().hang_timeout_ms == 6'000);
  size_t recorded = watch.changes.size();
  for (int step = 22; step <= 40; ++step) watch.beat(0, step, now += 500);  // faster steps: no shrinking
  CHECK(watch.timeouts.limits().hang_timeout_ms == 6'000);
  CHECK(watch.changes.size() == recorded);
  watch.beat(0, 41, now += 4'000);  // a legitimately long step: the limit grows, and that is recorded
  CHECK(watch.timeouts.limits().hang_timeout_ms == 20'000);
  REQUIRE(watch.changes.size() == recorded + 1);
  CHECK(watch.changes.back().hang_timeout_ms == 20'000);

  // A restart: warm-up again (its first steps load a checkpoint), at least what was learnt.
  watch.start(1, 1, now);
  CHECK(watch.timeouts.limits().hang_timeout_ms == 60'000);
  CHECK(watch.changes.back().basis == Changed::kWarmUp);
  CHECK(watch.changes.back().gen == 1);
  for (int step = 41; step <= 60; ++step) watch.beat(0, step, now += 500);
  CHECK(watch.timeouts.limits().hang_timeout_ms == 20'000);  // the carried estimate (4 s)
  CHECK(watch.changes.back().basis == Changed::kStepTime);
}

TEST_CASE("auto: a warm-up slower than the initial value raises it") {
  Watch watch(auto_spec(1000), 1);
  watch.beat(0, 1, 90'000);  // 90 s to the first step
  CHECK(watch.timeouts.limits().hang_timeout_ms == 450'000);
  CHECK(watch.timeouts.in_force().basis == Changed::kWarmUp);
  CHECK(watch.timeouts.in_force().longest_step_ms == 90'000);
}

TEST_CASE("auto: an explicit checkpoint_timeout or progress_window is kept, a checkpoint limit never under the hang one") {
  spec::JobSpec spec = auto_spec(1000);
  spec.heartbeat.checkpoint_timeout = Millis(90'000);
  spec.elastic.progress_window = Millis(5'000);
  Watch watch(spec, 1);
  CHECK(watch.timeouts.limits().checkpoint_timeout_ms == 90'000);
  CHECK(watch.timeouts.in_force().progress_window_ms == 5'000);
  watch.beat(0, 1, 1'000);
  watch.beat(0, 2, 100'000);  // a 99 s warm-up step: hang timeout 495 s
  CHECK(watch.timeouts.limits().checkpoint_timeout_ms == 495'000);
  CHECK(watch.timeouts.in_force().progress_window_ms == 5'000);
}

TEST_CASE("an explicit hang_timeout is used as the spec sets it, and never recorded as a change") {
  spec::JobSpec spec = auto_spec(500);
  spec.heartbeat.timeout = Millis(5'000);
  spec.heartbeat.hang_timeout = Millis(20'000);
  Watch watch(spec, 1);
  CHECK(!watch.timeouts.automatic());
  for (int step = 1; step <= 20; ++step) watch.beat(0, step, step * 100);
  CHECK(watch.timeouts.limits() == HangLimits{20'000, 600'000, 500});
  CHECK(watch.timeouts.limits() == HangLimits::of(spec.heartbeat));
  Changed in_force = watch.timeouts.in_force();
  CHECK(in_force.basis == Changed::kSpec);
  CHECK(in_force.progress_window_ms == 40'000);
  CHECK(in_force.text() == "20s (heartbeat.hang_timeout)");
  CHECK(watch.changes.empty());
}

TEST_CASE("no hang is declared while a host may be lost, and once it is heard again, the hang is") {
  Watch watch(auto_spec(100), 2);
  int64_t now = 0;
  for (int step = 1; step <= 20; ++step) {
    now += 100;
    watch.beat(0, step, now);
    watch.beat(1, step, now);
  }
  REQUIRE(watch.timeouts.limits().hang_timeout_ms == 1'000);
  now += 1'500;
  CHECK(!watch.check(now, true));
  std::optional<Hang> hang = watch.check(now, false);
  REQUIRE(hang);
  CHECK(hang->overdue_ms == 500);
}
