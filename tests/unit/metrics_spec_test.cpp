// The spec's metrics section: defaults, every key read back through to_yaml (a resumed run keeps
// them), and errors naming the key: a listen address that is not loopback, a threshold out of range.

#include <doctest/doctest.h>

#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::spec;

namespace {

LoadResult parse(const std::string& text) { return testing::parse_section(text); }
std::string only_error(const std::string& text) { return testing::only_section_error(text); }

}  // namespace

TEST_CASE("metrics: defaults, and every key read and written back") {
  LoadResult plain = parse("");
  REQUIRE(plain.ok());
  CHECK(plain.spec->metrics == MetricsSettings{});
  CHECK(plain.spec->metrics.straggler_threshold == 0.75);
  CHECK(to_yaml(*plain.spec).find("metrics") == std::string::npos);  // older runs' specs read back the same

  LoadResult set = parse("metrics:\n  textfile_dir: prom\n  listen: 127.0.0.1:9400\n  straggler_threshold: 0.5\n"
                         "  interval: 2s\n");
  REQUIRE_MESSAGE(set.ok(), set.message());
  CHECK(set.spec->metrics.textfile_dir == "/specs/prom");
  CHECK(set.spec->metrics.listen == "127.0.0.1:9400");
  CHECK(set.spec->metrics.straggler_threshold == 0.5);
  CHECK(set.spec->metrics.interval == Millis(2000));
  LoadResult again = parse_job_spec(to_yaml(*set.spec), "spec.yaml", "/elsewhere", {});
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->metrics == set.spec->metrics);
  CHECK(parse("metrics:\n  listen: localhost:9400\n").ok());
  CHECK(parse("metrics:\n  listen: '[::1]:9400'\n").ok());
}

TEST_CASE("metrics: a listen address off loopback, bad values and unknown keys are refused by name") {
  std::string open = only_error("metrics:\n  listen: 0.0.0.0:9400\n");
  CHECK_MESSAGE(open.find("job.yaml:5:11: metrics.listen: '0.0.0.0:9400' is not a loopback address") == 0, open);
  CHECK(open.find("write 127.0.0.1:9400") != std::string::npos);
  CHECK(only_error("metrics:\n  listen: 10.1.2.3:80\n").find("not a loopback address") != std::string::npos);
  CHECK(only_error("metrics:\n  listen: 127.0.0.1\n").find("metrics.listen: '127.0.0.1' is not HOST:PORT") !=
        std::string::npos);
  CHECK(only_error("metrics:\n  listen: 127.0.0.1:0\n").find("is not HOST:PORT") != std::string::npos);
  std::string threshold = only_error("metrics:\n  straggler_threshold: 1.5\n");
  CHECK_MESSAGE(threshold.find("metrics.straggler_threshold: expected a number above 0 and at most 1") !=
                    std::string::npos,
                threshold);
  CHECK(only_error("metrics:\n  straggler_threshold: fast\n").find("got 'fast'") != std::string::npos);
  CHECK(only_error("metrics:\n  interval: 10ms\n").find("metrics.interval") != std::string::npos);
  CHECK(only_error("metrics:\n  port: 9400\n").find("metrics.port") != std::string::npos);
}
