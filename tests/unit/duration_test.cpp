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

TEST_CASE("each duration style writes what its readers expect") {
  using S = DurationStyle;
  CHECK(format_duration(Millis(999), S::elapsed) == "0s");
  CHECK(format_duration(Millis(-5'000), S::elapsed) == "0s");
  CHECK(format_duration(Millis(65'000), S::elapsed) == "1m05s");
  CHECK(format_duration(Millis(7'380'000), S::elapsed) == "2h03m");
  CHECK(format_duration(Millis(273'600'000), S::elapsed) == "3d04h");
  CHECK(format_duration(Millis(400), S::tenths) == "0.4s");
  CHECK(format_duration(Millis(12'000), S::tenths) == "12.0s");
  CHECK(format_duration(Millis(66'000), S::tenths) == "1m06s");
  CHECK(format_duration(Millis(850), S::report) == "850 ms");
  CHECK(format_duration(Millis(-3), S::report) == "0 ms");
  CHECK(format_duration(Millis(12'340), S::report) == "12.3 s");
  CHECK(format_duration(Millis(65'000), S::report) == "1m05s");
  CHECK(format_duration(Millis(1'500), S::decimal_seconds) == "1.500");
  CHECK(format_duration(Millis(20'007), S::decimal_seconds) == "20.007");
}

TEST_CASE("closest_match suggests plausible typos only") {
  CHECK(closest_match("hearbeat", {"heartbeat", "hosts", "worker"}) == "heartbeat");
  CHECK(closest_match("zzzzzz", {"heartbeat", "hosts", "worker"}).empty());
}

TEST_CASE("shell_quote survives quotes and dollars") {
  CHECK(shell_quote("it's $(x)") == "'it'\\''s $(x)'");
}
