// Checkpoint files of a real run (dtrain-train on localhost): every shard and manifest is 0600
// by default, and exactly the spec's checkpoint.file_mode ("0640") when it asks for a
// group-readable mode, whatever the umask; no temp file is left next to them.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <string>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

std::string trainer_spec(const std::string& name, const std::string& checkpoint_extra) {
  return "version: 1\nname: " + name +
         "\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"30\", --log-every, \"10\"]\n  backend: gloo\n"
         "batch: {global: 16, micro: 8}\n"
         "checkpoint: {interval_steps: 10, keep: 2" + checkpoint_extra + "}\n"
         "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 30s}\n";
}

/// The permission bits of every file under `<run>/checkpoints`, by path; fails on a temp file.
std::map<std::string, unsigned> checkpoint_modes(const std::string& run_dir) {
  std::map<std::string, unsigned> modes;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(run_dir + "/checkpoints")) {
    if (!entry.is_regular_file()) continue;
    std::string path = entry.path().string();
    CHECK_MESSAGE(path.find(".tmp.") == std::string::npos, "temp file left: " << path);
    struct stat info{};
    REQUIRE(::lstat(path.c_str(), &info) == 0);
    modes[path] = info.st_mode & 07777;
  }
  return modes;
}

/// Submits the spec and returns the modes of its checkpoint files (at least a shard per rank's
/// coordinate and a manifest per kept step).
std::map<std::string, unsigned> run_and_collect(const std::string& name, const std::string& checkpoint_extra) {
  DtrainEnv env;
  DtrainProcess run = env.run({"submit", env.write_spec(name + ".yaml", trainer_spec(name, checkpoint_extra))});
  REQUIRE_MESSAGE(run.exit_code == 0, run.err());
  REQUIRE(env.run_dirs().size() == 1);
  std::map<std::string, unsigned> modes = checkpoint_modes(env.run_dirs()[0]);
  int manifests = 0;
  for (const auto& [path, mode] : modes) manifests += path.ends_with("/MANIFEST.json") ? 1 : 0;
  CHECK(manifests == 2);  // keep: 2
  CHECK(modes.size() >= 4);
  return modes;
}

}  // namespace

TEST_CASE("a real run's checkpoint shards and manifests are 0600 by default and 0640 with checkpoint.file_mode") {
  for (const auto& [path, mode] : run_and_collect("owner-only", "")) {
    CAPTURE(path);
    CHECK(mode == 0600);
  }
  for (const auto& [path, mode] : run_and_collect("group-readable", ", file_mode: \"0640\"")) {
    CAPTURE(path);
    CHECK(mode == 0640);
  }
}
