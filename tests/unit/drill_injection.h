#pragma once
// Scripted drills for the grading tests: the injection of kill-rank:1 at a known time, and
// events stamped relative to it.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/drill/grading.h"

namespace dtrain::testing {

inline constexpr int64_t kInjectedAt = 1'795'000'000'000;

/// `event` with its "ts" `offset_ms` after the injection.
inline nlohmann::json at(int64_t offset_ms, nlohmann::json event) {
  event["ts"] = format_timestamp_utc(kInjectedAt + offset_ms);
  return event;
}

/// kill-rank:1 of generation 0 on localhost, pid 4242 at step 64.
inline drill::Injection kill_rank_1() {
  drill::Injection injection;
  injection.fault = *drill::parse_fault("kill-rank:1");
  injection.wall_ms = kInjectedAt;
  injection.pid = 4242;
  injection.at_step = 64;
  injection.generation = 0;
  injection.hosts = {"localhost"};
  return injection;
}

}  // namespace dtrain::testing
