#pragma once
// Events as the run log's reader yields them (LoggedEvent), from JSON objects a test writes by
// hand with their "ts": for the readers that take typed events (goodput, drill grading).

#include <doctest/doctest.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/runlog/event_log.h"

namespace dtrain::testing {

inline std::vector<LoggedEvent> typed(const std::vector<nlohmann::json>& events) {
  std::vector<LoggedEvent> out;
  for (const nlohmann::json& event : events) {
    Result<LoggedEvent> logged = to_logged_event(event);
    REQUIRE_MESSAGE(logged.ok(), logged.error().message);
    out.push_back(std::move(*logged));
  }
  return out;
}

}  // namespace dtrain::testing
