// The spec's logs section: logs.max_bytes' default (1 GiB), sizes with units, "unlimited", the
// value read back through to_yaml (a resumed run rotates at the same size), and errors that
// name the key, quote the value and say what to write.

#include <doctest/doctest.h>

#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::spec;
using dtrain::testing::only_section_error;
using dtrain::testing::parse_section;

namespace {

uint64_t max_bytes_of(const std::string& value) {
  LoadResult result = parse_section("logs: {max_bytes: " + value + "}\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  return result.spec->logs.max_bytes;
}

}  // namespace

TEST_CASE("logs.max_bytes: 1 GiB by default, sizes with units, unlimited, and read back") {
  LoadResult plain = parse_section("");
  REQUIRE(plain.ok());
  CHECK(plain.spec->logs.max_bytes == (1ull << 30));
  CHECK(to_yaml(*plain.spec).find("logs") == std::string::npos);  // older runs' specs read back the same

  CHECK(max_bytes_of("4096") == 4096);
  CHECK(max_bytes_of("64KiB") == 64ull << 10);
  CHECK(max_bytes_of("'512 MiB'") == 512ull << 20);
  CHECK(max_bytes_of("2GiB") == 2ull << 30);
  CHECK(max_bytes_of("unlimited") == 0);
  for (const char* value : {"64KiB", "unlimited", "3GiB"}) {
    LoadResult set = parse_section("logs: {max_bytes: " + std::string(value) + "}\n");
    REQUIRE(set.ok());
    LoadResult again = parse_job_spec(to_yaml(*set.spec), "spec.yaml", "/elsewhere", {});
    REQUIRE_MESSAGE(again.ok(), again.message());
    CHECK(again.spec->logs == set.spec->logs);
  }
}

TEST_CASE("logs.max_bytes: too small, unknown units, negatives and lists are refused by name") {
  std::string small = only_section_error("logs:\n  max_bytes: 100\n");
  CHECK_MESSAGE(small.find("job.yaml:5:14: logs.max_bytes: expected a size of at least 4KiB") == 0, small);
  CHECK(small.find("got '100'") != std::string::npos);
  CHECK(small.find("rotated to <rank>.log.1") != std::string::npos);
  CHECK(only_section_error("logs:\n  max_bytes: 1GB\n").find("got '1GB'") != std::string::npos);
  CHECK(only_section_error("logs:\n  max_bytes: -1\n").find("got '-1'") != std::string::npos);
  CHECK(only_section_error("logs:\n  max_bytes: 0\n").find("'unlimited'") != std::string::npos);
  CHECK(only_section_error("logs:\n  max_bytes: 99999999GiB\n").find("got '99999999GiB'") != std::string::npos);
  CHECK(only_section_error("logs:\n  max_bytes: [1]\n").find("logs.max_bytes") != std::string::npos);
  CHECK(only_section_error("logs:\n  max_byte: 1GiB\n").find("max_bytes") != std::string::npos);  // did you mean
}

TEST_CASE("scale: tree auto by default, on/off and a fanout, read back - a tree over srun is refused") {
  LoadResult plain = parse_section("");
  REQUIRE(plain.ok());
  CHECK(plain.spec->scale == ScaleSettings{});
  CHECK(to_yaml(*plain.spec).find("scale") == std::string::npos);
  LoadResult set = parse_section("scale: {tree: on, fanout: 16}\n");
  REQUIRE_MESSAGE(set.ok(), set.message());
  CHECK(set.spec->scale.tree == RelayTreeMode::on);
  CHECK(set.spec->scale.fanout == 16);
  LoadResult again = parse_job_spec(to_yaml(*set.spec), "spec.yaml", "/elsewhere", {});
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->scale == set.spec->scale);

  CHECK(only_section_error("scale: {tree: yes}\n").find("scale.tree") != std::string::npos);
  CHECK(only_section_error("scale: {fanout: 1}\n").find("scale.fanout") != std::string::npos);
  // (Outside an allocation transport: srun has its own error too.)
  LoadResult srun = parse_section("transport: srun\nscale: {tree: on}\n");
  REQUIRE_FALSE(srun.ok());
  CHECK_MESSAGE(srun.message().find("job.yaml:5:15: scale.tree: a relay tree reaches hosts over SSH, and this job's "
                                    "transport is srun") != std::string::npos, srun.message());
}
