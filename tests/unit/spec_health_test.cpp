// The spec's health section (issue 29): defaults, every key read and read back through to_yaml,
// and errors that name the key and the line and say what to write.

#include <doctest/doctest.h>

#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::spec;
using dtrain::testing::only_section_error;
using dtrain::testing::parse_section;

TEST_CASE("health: on by default with its limits, every key read, and read back through to_yaml") {
  LoadResult none = parse_section("");
  REQUIRE(none.ok());
  CHECK(none.spec->health == HealthSettings{});
  CHECK(none.spec->health.enabled);
  CHECK(to_yaml(*none.spec).find("health") == std::string::npos);

  LoadResult full = parse_section(
      "health:\n"
      "  command: /usr/sbin/nhc -t 20\n"
      "  command_timeout: 20s\n"
      "  diagnose: dcgmi diag -r 1\n"
      "  diagnose_timeout: 2m\n"
      "  leftover_gpu_memory: 1GiB\n"
      "  reclaim_wait: 10s\n"
      "  write_timeout: 2s\n"
      "  min_free: 20GB\n"
      "  quarantine: {after: 2, window: 6h, for: 48h}\n");
  REQUIRE_MESSAGE(full.ok(), full.message());
  const HealthSettings& health = full.spec->health;
  CHECK(health.command == "/usr/sbin/nhc -t 20");
  CHECK(health.command_timeout == Millis(20'000));
  CHECK(health.diagnose == "dcgmi diag -r 1");
  CHECK(health.diagnose_timeout == Millis(120'000));
  CHECK(health.leftover_gpu_memory_mb == 1024);
  CHECK(health.reclaim_wait == Millis(10'000));
  CHECK(health.write_timeout == Millis(2'000));
  CHECK(health.min_free_mb == 19073);  // 20 GB = 20e9 bytes
  CHECK(health.quarantine_after == 2);
  CHECK(health.quarantine_window == Millis(6 * 3600 * 1000));
  CHECK(health.quarantine_duration == Millis(48LL * 3600 * 1000));

  LoadResult again = spec::parse_job_spec(to_yaml(*full.spec), "again.yaml", "/specs", {});
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->health == health);

  LoadResult off = parse_section("health: {enabled: false}\n");
  REQUIRE(off.ok());
  CHECK_FALSE(off.spec->health.enabled);
}

TEST_CASE("health: bad values name the key and the line and say what to write") {
  CHECK(only_section_error("health:\n  comand: x\n").find("did you mean 'command'?") != std::string::npos);
  std::string list = only_section_error("health:\n  command: [nhc, -t]\n");
  CHECK(list.find("job.yaml:5:12: health.command: expected a command line") != std::string::npos);
  CHECK(only_section_error("health:\n  leftover_gpu_memory: lots\n").find("expected a size such as 512MB") != std::string::npos);
  CHECK(only_section_error("health:\n  quarantine: {after: -1}\n").find("health.quarantine.after") != std::string::npos);
  CHECK(only_section_error("health:\n  enabled: maybe\n").find("health.enabled") != std::string::npos);
}
