// config.health from the spec (launcher/run/health_request.h): which checks every agent makes,
// the master whose route it checks, and the clock offset the supervisor adds to a remote host's
// report.

#include <doctest/doctest.h>

#include "launcher/run/health_request.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using dtrain::testing::parse_section;

TEST_CASE("config.health: the spec's limits, the run's checkpoint directory, and none when health is off") {
  spec::LoadResult loaded = parse_section("health: {command: /usr/sbin/nhc, command_timeout: 20s, reclaim_wait: 2s}\n");
  REQUIRE(loaded.ok());
  std::optional<proto::HealthRequest> request = run::health_request(*loaded.spec, "/runs/r1/checkpoints");
  REQUIRE(request.has_value());
  CHECK(request->checkpoint_dir == "/runs/r1/checkpoints");
  CHECK(request->command == "/usr/sbin/nhc");
  CHECK(request->command_timeout_ms == 20'000);
  CHECK(request->reclaim_wait_ms == 2'000);
  CHECK(request->master_addr == "127.0.0.1");  // no hosts: localhost, this machine

  spec::LoadResult off = parse_section("health: {enabled: false}\n");
  REQUIRE(off.ok());
  CHECK_FALSE(run::health_request(*off.spec, "/x").has_value());
}

TEST_CASE("the master checked: the user's MASTER_ADDR, a remote first host, or none when local and remote mix") {
  spec::LoadResult user = spec::parse_job_spec(
      "version: 1\nhosts: [node1, node2]\nworker:\n  command: [python3, train.py]\n  env: {MASTER_ADDR: 10.0.0.9}\n",
      "job.yaml", "/specs", {});
  REQUIRE(user.ok());
  CHECK(run::health_request(*user.spec, "")->master_addr == "10.0.0.9");
  CHECK_FALSE(run::health_request(*user.spec, "")->checkpoint_dir.has_value());

  spec::LoadResult remote = parse_section("hosts: [node1, node2]\n");
  REQUIRE(remote.ok());
  CHECK(run::health_request(*remote.spec, "")->master_addr == "node1");

  spec::LoadResult mixed = parse_section("hosts: [localhost, node2]\n");
  REQUIRE(mixed.ok());
  CHECK_FALSE(run::health_request(*mixed.spec, "")->master_addr.has_value());
}

TEST_CASE("the clock offset check: within 1 s ok with the offset, past it a warning with the fix") {
  proto::HealthCheck close = run::clock_offset_check(-12);
  CHECK(close.name == "clock offset");
  CHECK(close.verdict == proto::HealthVerdict::ok);
  CHECK(close.message == "-12 ms from the launch host's clock");
  CHECK(run::clock_offset_check(1000).verdict == proto::HealthVerdict::ok);
  proto::HealthCheck skewed = run::clock_offset_check(4200);
  CHECK(skewed.verdict == proto::HealthVerdict::warn);
  CHECK(skewed.message.find("+4200 ms off the launch host's") != std::string::npos);
  CHECK(skewed.message.find("chrony") != std::string::npos);
  CHECK(run::clock_offset_check(-1001).verdict == proto::HealthVerdict::warn);
}
