// A site that requires an intent (issue 30 item 1): `dtrain submit` refuses a spec of such a
// tenant without intent:, with an example of one and no run started; the same spec with an intent
// runs, and its spec.yaml keeps it; other tenants and `dtrain run` are not held to it.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

std::string spec_of(const std::string& tenant, const std::string& intent) {
  return "version: 1\nname: policy\ntenant: " + tenant + "\nworker:\n  command: [/bin/true]\n" + intent;
}

const std::string kIntent =
    "intent:\n"
    "  model: {parameters: 350M, precision: bf16, optimizer: adamw}\n"
    "  recovery: {max_recovery: 2m, max_lost: 100 steps}\n";

}  // namespace

TEST_CASE("intent policy: submit refuses a required tenant's spec without intent, runs it with one, spares the others") {
  DtrainEnv env;
  ::mkdir(env.home().c_str(), 0700);
  write_text(env.home() + "/config.yaml", "intent:\n  required_for: [nlp]\n");

  DtrainProcess refused = env.run({"submit", env.write_spec("bare.yaml", spec_of("nlp", ""))});
  CHECK(refused.exit_code == 2);
  CHECK_MESSAGE(refused.err().find("requires tenant nlp to state the job's intent") != std::string::npos, refused.err());
  CHECK(refused.err().find("intent.required_for") != std::string::npos);
  CHECK(refused.err().find("recovery: {max_recovery: 5m, max_lost: 200 steps, mode: restart}") != std::string::npos);
  CHECK(env.run_dirs().empty());  // nothing started, nothing recorded as a run

  DtrainProcess stated = env.run({"submit", env.write_spec("stated.yaml", spec_of("nlp", kIntent))});
  CHECK_MESSAGE(stated.exit_code == 0, stated.err());
  REQUIRE(env.run_dirs().size() == 1);
  std::string kept = read_text(env.run_dirs()[0] + "/spec.yaml");
  CHECK(kept.find("parameters: 350000000") != std::string::npos);
  CHECK(kept.find("max_lost: 100 steps") != std::string::npos);

  DtrainProcess other = env.run({"submit", env.write_spec("other.yaml", spec_of("vision", ""))});
  CHECK_MESSAGE(other.exit_code == 0, other.err());

  DtrainProcess command_line = env.run({"run", "-n", "1", "--no-python", "--", "/bin/true"});
  CHECK_MESSAGE(command_line.exit_code == 0, command_line.err());

  write_text(env.home() + "/config.yaml", "intent:\n  required_for: nlp, vision\n  extra: 1\n");
  DtrainProcess broken = env.run({"submit", env.write_spec("other2.yaml", spec_of("vision", kIntent))});
  CHECK(broken.exit_code == 2);
  CHECK_MESSAGE(broken.err().find("config.yaml:3:3: intent.extra") != std::string::npos, broken.err());
}
