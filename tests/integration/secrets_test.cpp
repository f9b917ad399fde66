// Secrets at rest (issue 26, item 7): a token in an env_file and one in the spec's worker.env
// reach the workers' environment, yet no file dtrain writes (the run directory, the registry) and
// nothing it prints holds either value. spec.yaml keeps the env_file's path and names and the
// worker.env secret as a pass_env name; `dtrain resume` reads both again, and says clearly what
// to do when the file is gone or the variable is not exported.

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "tests/integration/dtrain_runner.h"
#include "tests/scoped_variable.h"

using namespace dtrain::testing;

namespace {

/// A value no other test or file holds by chance.
std::string unique_secret(const std::string& prefix) {
  std::random_device random;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%08x%08x", random(), random());
  return prefix + buffer;
}

/// Every file under `root` (a run directory, DTRAIN_HOME with its registry) that holds `value`
/// anywhere in its bytes: what `grep -r` would list.
std::vector<std::string> files_holding(const std::string& root, const std::string& value) {
  std::vector<std::string> found;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(root, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file() && read_text(it->path().string()).find(value) != std::string::npos) {
      found.push_back(it->path().string());
    }
  }
  return found;
}

void check_nowhere(DtrainEnv& env, const std::vector<const DtrainProcess*>& commands,
                   const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    CHECK_MESSAGE(files_holding(env.home(), secret).empty(), "a file under DTRAIN_HOME holds " << secret);
    for (const DtrainProcess* command : commands) {
      CHECK_MESSAGE(command->out().find(secret) == std::string::npos, "stdout printed " << secret);
      CHECK_MESSAGE(command->err().find(secret) == std::string::npos, "stderr printed " << secret);
    }
  }
}

}  // namespace

TEST_CASE("secrets: env_file and worker.env tokens reach the workers, no file or message of dtrain holds them, resume reads them again") {
  ScopedVariable no_wandb("WANDB_API_KEY", nullptr);
  DtrainEnv env;
  const std::string file_secret = unique_secret("hf_file_");
  const std::string spec_secret = unique_secret("wandb_spec_");
  // What the worker compares with, outside DTRAIN_HOME: the run directory never sees these files.
  std::filesystem::create_directories(env.dir.path + "/expected");
  write_text(env.dir.path + "/expected/hf", file_secret);
  write_text(env.dir.path + "/expected/wandb", spec_secret);
  std::string env_file = env.dir.path + "/secrets.env";
  write_text(env_file, "HF_TOKEN=" + file_secret + "\nDATASET=imagenet\n");
  // Fails its first run after checking (so the run can be resumed), succeeds from then on.
  std::string script = env.dir.path + "/check.sh";
  write_text(script,
             "expected=" + env.dir.path + "/expected\n"
             "[ \"$HF_TOKEN\" = \"$(cat $expected/hf)\" ] && echo 'HF_TOKEN as given' || { echo 'HF_TOKEN differs'; exit 5; }\n"
             "[ \"$WANDB_API_KEY\" = \"$(cat $expected/wandb)\" ] && echo 'WANDB_API_KEY as given' || { echo 'WANDB_API_KEY differs'; exit 6; }\n"
             "[ \"$DATASET\" = imagenet ] && [ \"$LR\" = 0.1 ] || { echo 'plain variables differ'; exit 7; }\n"
             "[ -e $expected/ran-once ] && exit 0\n"
             "touch $expected/ran-once\nexit 1\n");
  std::string spec = env.write_spec("job.yaml",
                                    "version: 1\nname: secrets\nslots_per_host: 1\n"
                                    "worker:\n  command: [/bin/sh, '" + script + "']\n"
                                    "  env: {WANDB_API_KEY: \"" + spec_secret + "\", LR: \"0.1\"}\n"
                                    "  env_file: secrets.env\n"
                                    "elastic: {max_restarts: 0}\n"
                                    "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n");

  DtrainProcess resolved = env.run({"validate", "--resolved", spec}, 30000);
  CHECK(resolved.exit_code == 0);
  CHECK(resolved.out().find("pass_env: [\"WANDB_API_KEY\"]") != std::string::npos);
  CHECK(resolved.out().find("env_file_names: [\"DATASET\", \"HF_TOKEN\"]") != std::string::npos);

  DtrainProcess first = env.run({"submit", spec});
  CHECK(first.exit_code == 1);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  std::string run_id = run_id_of(dir);
  std::string log = read_text(dir + "/ranks/0.log");
  INFO("rank log:\n" << log << "\nsubmit stderr:\n" << first.err());
  CHECK(log.find("HF_TOKEN as given") != std::string::npos);
  CHECK(log.find("WANDB_API_KEY as given") != std::string::npos);
  std::string kept = read_text(dir + "/spec.yaml");
  CHECK(kept.find("env_file: \"" + env_file + "\"") != std::string::npos);
  CHECK(kept.find("pass_env: [\"WANDB_API_KEY\"]") != std::string::npos);
  CHECK(kept.find("LR: \"0.1\"") != std::string::npos);
  REQUIRE(std::filesystem::exists(env.home() + "/registry.db"));  // the grep below covers a real registry

  // The env_file gone: refused, naming the file, what the workers would miss, and the fix.
  std::filesystem::rename(env_file, env_file + ".away");
  DtrainProcess no_file = [&] {
    ScopedVariable wandb("WANDB_API_KEY", spec_secret.c_str());
    return env.run({"resume", run_id}, 60000);
  }();
  CHECK(no_file.exit_code == 2);
  INFO("resume without the env_file:\n" << no_file.err());
  CHECK(no_file.err().find(dir + "/spec.yaml:") != std::string::npos);
  CHECK(no_file.err().find("worker.env_file: cannot read '" + env_file + "': No such file or directory") != std::string::npos);
  CHECK(no_file.err().find("take DATASET, HF_TOKEN from it") != std::string::npos);
  CHECK(no_file.err().find("restore the file") != std::string::npos);

  // The file back, with one more variable, but the spec's secret not exported: refused too.
  write_text(env_file, "HF_TOKEN=" + file_secret + "\nDATASET=imagenet\nEXTRA=1\n");
  std::filesystem::remove(env_file + ".away");
  DtrainProcess no_variable = env.run({"resume", run_id}, 60000);
  CHECK(no_variable.exit_code == 2);
  CHECK(no_variable.err().find("worker.pass_env: WANDB_API_KEY is not set in dtrain's environment") != std::string::npos);
  CHECK(no_variable.err().find("export WANDB_API_KEY=") != std::string::npos);

  // Both there: the workers get both values again and the run finishes; the new name is said.
  DtrainProcess resumed = [&] {
    ScopedVariable wandb("WANDB_API_KEY", spec_secret.c_str());
    return env.run({"resume", run_id}, 120000);
  }();
  INFO("resume:\n" << resumed.err());
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.err().find("defines other variables than when the run was submitted (new: EXTRA; gone: none)") !=
        std::string::npos);
  std::string resumed_log = read_text(dir + "/ranks/0.log");
  CHECK(resumed_log.find("differ") == std::string::npos);
  CHECK(events_named(read_events(dir + "/events.jsonl"), "run.resumed").size() == 1);

  check_nowhere(env, {&resolved, &first, &no_file, &no_variable, &resumed}, {file_secret, spec_secret});
  DtrainProcess status = env.run({"status", run_id}, 30000);
  CHECK(status.exit_code == 0);
  check_nowhere(env, {&status}, {file_secret, spec_secret});
  check_nothing_left(run_id);
}

TEST_CASE("secrets: a secret worker.env value is never quoted in a spec error, and pass_env needs the variable") {
  ScopedVariable no_token("DTRAIN_TEST_PASSED_TOKEN", nullptr);
  DtrainEnv env;
  const std::string secret = unique_secret("tok_");
  std::string bad = env.write_spec("bad.yaml",
                                   "version: 1\nworker:\n  command: [/bin/true]\n"
                                   "  env: {API_TOKEN: \"" + secret + "\\x7f\"}\n"
                                   "  pass_env: [DTRAIN_TEST_PASSED_TOKEN]\n");
  DtrainProcess refused = env.run({"validate", bad}, 30000);
  CHECK(refused.exit_code == 2);
  INFO(refused.err());
  CHECK(refused.err().find("worker.env.API_TOKEN: the value holds the control byte 0x7f (DEL)") != std::string::npos);
  CHECK(refused.err().find("worker.pass_env: DTRAIN_TEST_PASSED_TOKEN is not set in dtrain's environment") !=
        std::string::npos);
  DtrainProcess set_bad = env.run({"validate", bad, "--set", "worker.env.API_TOKEN=[" + secret}, 30000);
  CHECK(set_bad.exit_code == 2);
  check_nowhere(env, {&refused, &set_bad}, {secret});
}
