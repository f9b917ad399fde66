#pragma once
// Time as the supervisor sees it. An interface so that tests can drive the pure supervisor with
// FakeClock instead of sleeping.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain {

class Clock {
 public:
  virtual ~Clock() = default;
  /// Monotonic milliseconds: for deadlines and durations.
  virtual int64_t monotonic_ms() const = 0;
  /// Unix-epoch milliseconds: for timestamps people read in events and logs.
  virtual int64_t wall_ms() const = 0;
  /// How many real milliseconds a wait of `clock_ms` of this clock's time takes (poll timeouts).
  virtual int64_t real_ms(int64_t clock_ms) const { return clock_ms; }
};

class SystemClock final : public Clock {
 public:
  int64_t monotonic_ms() const override;
  int64_t wall_ms() const override;
};

/// Starts at a fixed wall time; moves only when told to.
class FakeClock final : public Clock {
 public:
  int64_t monotonic_ms() const override { return monotonic_; }
  int64_t wall_ms() const override { return wall_; }
  void advance_ms(int64_t ms) { monotonic_ += ms; wall_ += ms; }

 private:
  int64_t monotonic_ = 1'000'000;
  int64_t wall_ = 1'795'000'000'000;  // late 2026
};

/// The system clock, running `speed` times faster from the moment it is made (thread-safe).
/// Driver tests share one with sim::FakeCluster: a 30 s heartbeat timeout or a 10 min
/// checkpoint timeout then passes in a fraction of a second, on both sides of the protocol.
class ScaledClock final : public Clock {
 public:
  explicit ScaledClock(int64_t speed);
  int64_t monotonic_ms() const override;
  int64_t wall_ms() const override;
  int64_t real_ms(int64_t clock_ms) const override { return (clock_ms + speed_ - 1) / speed_; }

 private:
  int64_t speed_;
  SystemClock real_;
  int64_t start_monotonic_, start_wall_;
};

/// "2026-11-29T23:40:01.123Z"
/// CPU time the calling thread has used, in microseconds (CLOCK_THREAD_CPUTIME_ID): what work
/// paced by its own cost measures, since wall time on a loaded machine counts other processes'
/// turns too.
int64_t thread_cpu_us();

std::string format_timestamp_utc(int64_t wall_ms);

/// format_timestamp_utc's form back to Unix-epoch milliseconds; nullopt for anything else (another
/// shape, a field that is not all digits, a date that does not exist). The one parser of the
/// events' "ts": drills, metrics, reports, the registry and `dtrain status` all use it.
std::optional<int64_t> parse_timestamp_utc(std::string_view text);

}  // namespace dtrain
