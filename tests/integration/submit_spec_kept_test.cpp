// A run whose spec.yaml cannot be written is not started (issue 26, item 8): without it `dtrain
// resume` could never load the run. The write fails for real: dtrain runs under a file-size limit
// (RLIMIT_FSIZE, which binds root too, unlike permission bits) smaller than its spec.yaml, with
// SIGXFSZ ignored so that write(2) fails with EFBIG as on a full quota.

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

TEST_CASE("submit: a spec.yaml that cannot be written fails the submit with exit 3, and no run is left") {
  DtrainEnv env;
  // An argument of 8 KiB makes spec.yaml far larger than the 2 KiB limit (`ulimit -f 4`: 512-byte
  // blocks in dash), while dtrain's few lines of stderr fit under it.
  std::string spec = env.write_spec("big.yaml", "version: 1\nname: kept\nworker:\n  command: [/bin/true, \"" +
                                                    std::string(8192, 'x') + "\"]\n");
  std::string out = env.dir.path + "/submit.out", err = env.dir.path + "/submit.err";
  std::string command = "cd '" + env.dir.path + "' && DTRAIN_HOME='" + env.home() +
                        "' timeout -s KILL 60 /bin/sh -c \"trap '' XFSZ; ulimit -f 4; exec '" DTRAIN_EXE
                        "' submit '" + spec + "'\" >'" + out + "' 2>'" + err + "'";
  int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  std::string stderr_text = read_text(err);
  INFO("stderr:\n" << stderr_text);
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(stderr_text.find("/spec.yaml: cannot write (File too large)") != std::string::npos);
  CHECK(stderr_text.find("the run was not started, as it could never be resumed without its spec") != std::string::npos);
  // Nothing half-started: no run directory (so nothing for status to list), no worker ran.
  CHECK(env.run_dirs().empty());
  DtrainProcess listed = env.run({"status"}, 30000);
  CHECK(listed.out().find("no runs in") != std::string::npos);

  // The same spec without the limit runs: the limit, not the spec, made the submit fail.
  DtrainProcess runs = env.run({"submit", spec});
  CHECK(runs.exit_code == 0);
  CHECK(env.run_dirs().size() == 1);
}
