#include <doctest/doctest.h>

#include "launcher/base/duration.h"
#include "launcher/base/strings.h"

using namespace dtrain;

TEST_CASE("durations parse with their unit") {
  CHECK(parse_duration("500ms").value() == Millis(500));
  CHECK(parse_duration("10s").value() == Millis(10'000));
  CHECK(parse_duration("1.5s").value() == Millis(1'500));
  CHECK(parse_duration("5m").value() == Millis(300'000));
  CHECK(parse_duration("1h").value() == Millis(3'600'000));
}

TEST_CASE("durations without a unit or with a bad one are refused with the fix") {
  auto bare = parse_duration("30");
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.error().message.find("no unit") != std::string::npos);
  CHECK(bare.error().message.find("500ms") != std::string::npos);
  CHECK_FALSE(parse_duration("5x").ok());
  CHECK_FALSE(parse_duration("").ok());
  CHECK_FALSE(parse_duration("s").ok());
  CHECK_FALSE(parse_duration("1.2.3s").ok());
}

TEST_CASE("durations format back to the shortest exact form") {
  CHECK(format_duration(Millis(500)) == "500ms");
  CHECK(format_duration(Millis(10'000)) == "10s");
  CHECK(format_duration(Millis(1'500)) == "1.5s");
  CHECK(format_duration(Millis(300'000)) == "5m");
  CHECK(format_duration(Millis(3'600'000)) == "1h");
}

TEST_CASE("closest_match suggests plausible typos only") {
  CHECK(closest_match("hearbeat", {"heartbeat", "hosts", "worker"}) == "heartbeat");
  CHECK(closest_match("zzzzzz", {"heartbeat", "hosts", "worker"}).empty());
}

TEST_CASE("shell_quote survives quotes and dollars") {
  CHECK(shell_quote("it's $(x)") == "'it'\\''s $(x)'");
}
