// The spec's top-level consistency key (one software stack on every host): strict by default,
// warn and off, read back through to_yaml (a resumed run compares the same way), and an error
// that names the key, quotes the value and lists the choices. And what each agent is asked to
// fingerprint: the worker command, its directory and only the variables that decide what it
// finds (never a secret of worker.env).

#include <doctest/doctest.h>

#include "launcher/run/worker_env.h"
#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::spec;
using dtrain::testing::only_section_error;
using dtrain::testing::parse_section;

TEST_CASE("consistency: strict by default, warn and off, and read back") {
  LoadResult plain = parse_section("");
  REQUIRE(plain.ok());
  CHECK(plain.spec->consistency == Consistency::strict);
  CHECK(to_yaml(*plain.spec).find("consistency") == std::string::npos);  // the default is not written
  for (auto [text, value] : {std::pair{"warn", Consistency::warn}, std::pair{"off", Consistency::off},
                             std::pair{"strict", Consistency::strict}}) {
    LoadResult set = parse_section(std::string("consistency: ") + text + "\n");
    REQUIRE_MESSAGE(set.ok(), set.message());
    CHECK(set.spec->consistency == value);
    LoadResult again = parse_job_spec(to_yaml(*set.spec), "spec.yaml", "/elsewhere", {});
    REQUIRE_MESSAGE(again.ok(), again.message());
    CHECK(again.spec->consistency == value);
  }
  std::string error = only_section_error("consistency: lenient\n");
  CHECK(error.find("job.yaml:4:") == 0);
  CHECK(error.find("consistency") != std::string::npos);
  CHECK(error.find("lenient") != std::string::npos);
  CHECK(error.find("warn") != std::string::npos);
}

TEST_CASE("the stack probe request: the worker command, its directory, and only the variables that decide what it finds") {
  LoadResult loaded = parse_job_spec(
      "version: 1\nworker:\n  command: [python3, train.py]\n  workdir: /work\n"
      "  env: {PYTHONPATH: /site, LD_LIBRARY_PATH: /opt/lib, WANDB_API_KEY: secret, DTRAIN_IMAGE_DIGEST: sha256:ab}\n",
      "job.yaml", "/specs", {});
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  std::optional<proto::StackProbeRequest> request = run::stack_probe_request(*loaded.spec);
  REQUIRE(request);
  CHECK(request->argv == std::vector<std::string>{"python3", "train.py"});
  CHECK(request->workdir == "/work");
  CHECK(request->env == std::map<std::string, std::string>{
                            {"PYTHONPATH", "/site"}, {"LD_LIBRARY_PATH", "/opt/lib"}, {"DTRAIN_IMAGE_DIGEST", "sha256:ab"}});
  loaded.spec->consistency = Consistency::off;
  CHECK_FALSE(run::stack_probe_request(*loaded.spec));
}
