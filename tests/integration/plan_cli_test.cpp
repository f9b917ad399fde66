// `dtrain plan` end to end: a real spec file, the real binary, its stdout, stderr and exit code.

#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/cluster_fixture.h"

namespace {

using dtrain::testing::run_command;

// A temporary directory holding one spec file; removed with everything in it.
struct SpecFile {
  std::filesystem::path dir;
  std::string path;

  explicit SpecFile(const std::string& yaml) {
    char pattern[] = "/tmp/dtrain-plan-cli-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    REQUIRE(made != nullptr);
    dir = made;
    path = (dir / "job.yaml").string();
    std::ofstream(path) << yaml;
  }
  ~SpecFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

// Three hosts of 2 slots, tensor 2 → data 3; global 96 = micro 16 × data 3 × grad_accum 2.
const char* kSpec = R"(version: 1
name: plan-cli
hosts: [gpu01, gpu02, gpu03]
spares: [gpu09]
slots_per_host: 2
worker:
  command: [python3, train.py]
parallelism:
  tensor: 2
  data: auto
batch:
  global: 96
  micro: 16
elastic:
  min_hosts: 2
)";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("dtrain plan prints the layout of a spec") {
  SpecFile spec(kSpec);
  auto result = run_command({DTRAIN_EXE, "plan", spec.path});
  CAPTURE(result.output);
  CHECK(result.status == 0);
  CHECK(has(result.output, "hosts: 3 (gpu01 2/2 slots, gpu02 2/2 slots, gpu03 2/2 slots)"));
  CHECK(has(result.output, "world 6 = data 3 × pipeline 1 × tensor 2; global batch 96 = micro 16 × "
                           "data 3 × grad_accum 2"));
  CHECK(has(result.output, "tensor groups: [0,1] [2,3] [4,5]"));
}

TEST_CASE("dtrain plan --without shows the spare taking over, and a shrink with its diff") {
  SpecFile spec(kSpec);
  auto replaced = run_command({DTRAIN_EXE, "plan", spec.path, "--without", "gpu02"});
  CAPTURE(replaced.output);
  CHECK(replaced.status == 0);
  CHECK(has(replaced.output, "before: world 6 = data 3"));
  CHECK(has(replaced.output, "without gpu02: host gpu02 excluded; spare gpu09 in use; gpu09 takes gpu02's place: ranks 2–3 at "
                             "(tp,pp,dp) (0,0,1) (1,0,1)\n"));
  CHECK(has(replaced.output, "replaced gpu02 with spare gpu09"));

  // Comma list and a repeated flag both work; gpu09 gone too, so the job shrinks.
  auto shrunk = run_command({DTRAIN_EXE, "plan", spec.path, "--without", "gpu02,gpu09"});
  CAPTURE(shrunk.output);
  CHECK(shrunk.status == 0);
  CHECK(has(shrunk.output, "without gpu02, gpu09: shrunk from 6 to 4 ranks; host gpu02 excluded; data 3 → 2; "
                           "grad_accum 2 → 3\n"));
  auto repeated = run_command({DTRAIN_EXE, "plan", spec.path, "--without", "gpu02", "--without", "gpu09"});
  CHECK(repeated.status == 0);
  CHECK(repeated.output == shrunk.output);
}

TEST_CASE("dtrain plan refuses what no plan allows, with exit code 2") {
  SpecFile spec(kSpec);
  auto unknown = run_command({DTRAIN_EXE, "plan", spec.path, "--without", "gpu2"});
  CHECK(unknown.status == 2);
  CHECK(has(unknown.output, "'gpu2' is not a host of this job (did you mean 'gpu02'?)"));

  auto no_shrink = run_command({DTRAIN_EXE, "plan", spec.path, "--set", "elastic.min_hosts=0",
                                "--without", "gpu02,gpu09"});
  CAPTURE(no_shrink.output);
  CHECK(no_shrink.status == 2);
  CHECK(has(no_shrink.output, "set elastic.min_hosts to allow shrinking"));

  auto too_big = run_command({DTRAIN_EXE, "plan", spec.path, "--set", "parallelism.data=4"});
  CAPTURE(too_big.output);
  CHECK(too_big.status == 2);
  CHECK(has(too_big.output, "needs 8 slots"));
}

TEST_CASE("dtrain plan prints the spec's diagnostics for an invalid spec") {
  SpecFile spec(std::string(kSpec) + "stop_grace: soon\n");
  auto result = run_command({DTRAIN_EXE, "plan", spec.path});
  CAPTURE(result.output);
  CHECK(result.status == 2);
  CHECK(has(result.output, "stop_grace"));
  CHECK(has(result.output, "job.yaml"));
}

TEST_CASE("dtrain plan --json is the plan document, with --set applied") {
  SpecFile spec(kSpec);
  // stdout only: the JSON must parse on its own.
  std::string command = dtrain::shell_quote(DTRAIN_EXE) + " plan " + dtrain::shell_quote(spec.path) +
                        " --json --set parallelism.tensor=1 2>/dev/null";
  auto result = run_command({"sh", "-c", command});
  REQUIRE(result.status == 0);
  nlohmann::json json = nlohmann::json::parse(result.output, nullptr, false);
  REQUIRE_FALSE(json.is_discarded());
  CHECK(json["spec"] == spec.path);
  CHECK(json["plan"]["world_size"] == 6);
  CHECK(json["plan"]["data"] == 6);
  CHECK(json["plan"]["ranks"][5]["host"] == "gpu03");
  CHECK(json["plan"]["ranks"][5]["local_rank"] == 1);
}
