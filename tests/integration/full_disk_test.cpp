// A disk that fills up during a run (docs/architecture.md §6, issue 10 item 3): the run log, state files
// and checkpoints live on a small tmpfs that this test mounts in a private mount namespace and
// then fills. What must hold afterwards, once space is freed: events.jsonl holds whole lines
// only, no temp file is left, `dtrain status` shows the run, no good checkpoint was lost and
// `dtrain resume` continues from it, and no process of the run is left.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/runlog/event_log.h"
#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;
namespace fs = std::filesystem;

namespace {

constexpr const char* kTmpfsSize = "size=16m";

std::string trainer_spec() {
  // Many steps: the disk is filled long before the end, and the resumed run is stopped.
  return "version: 1\nname: fulldisk\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"1000000\", --log-every, \"20\"]\n  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 20, keep: 2}\n"
         "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 30s}\n"
         "stop_grace: 2s\n"
         // The 16 MiB tmpfs is far below the health check's 1 GiB default: this test is about
         // what happens when it fills, so let the host in.
         "health: {min_free: 1MiB}\n";
}

/// Steps of checkpoint.committed events (lines that do not parse are not counted).
std::vector<int64_t> committed_steps(const std::string& events_path) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& event : events_named(read_events(events_path), "checkpoint.committed")) {
    if (event.contains("step") && event["step"].is_number_integer()) steps.push_back(event["step"].get<int64_t>());
  }
  return steps;
}

/// Writes zeros into `path` until the file system is full; returns the errno that stopped it.
int fill_until_full(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  std::string block(1 << 16, '\0');
  int error = 0;
  for (;;) {
    ssize_t written = ::write(fd, block.data(), block.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
  }
  ::close(fd);
  return error;
}

/// Files under `root` whose names say they are temporary ("x.tmp.<pid>", ".shard...tmp.<pid>").
std::vector<std::string> temp_files(const std::string& root) {
  std::vector<std::string> found;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(root, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    std::string name = it->path().filename().string();
    if (name.find(".tmp.") != std::string::npos || name.rfind(".deleting-", 0) == 0) {
      found.push_back(it->path().string());
    }
  }
  return found;
}

/// The newest step-<N> directory of `dir` that holds a MANIFEST.json, or -1.
int64_t newest_manifest_step(const std::string& dir) {
  int64_t newest = -1;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / "MANIFEST.json")) continue;
    newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
  }
  return newest;
}

void check_log_is_whole_lines(const std::string& events_path) {
  std::string text = read_text(events_path);
  REQUIRE_FALSE(text.empty());
  CHECK_MESSAGE(text.back() == '\n', "events.jsonl ends in a partial line");
  std::vector<std::string> warnings;
  dtrain::Result<std::vector<dtrain::LoggedEvent>> events = dtrain::read_logged_events(
      events_path, [&](const dtrain::EventLineError& skipped) { warnings.push_back(skipped.message()); });
  REQUIRE_MESSAGE(events.ok(), events.error().message);
  CHECK_MESSAGE(warnings.empty(), (warnings.empty() ? "" : warnings.front()));
}

}  // namespace

TEST_CASE("a disk that fills during a run: whole log lines, no temp files, status and resume work once space is freed") {
  if (::geteuid() != 0) skip_test("full-disk test: needs root to mount a small tmpfs");
  if (::unshare(CLONE_NEWNS) != 0) skip_test(std::string("full-disk test: unshare(CLONE_NEWNS): ") + std::strerror(errno));
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    skip_test(std::string("full-disk test: cannot make mounts private: ") + std::strerror(errno));
  }
  DtrainEnv env;
  REQUIRE(::mkdir(env.home().c_str(), 0700) == 0);
  if (::mount("tmpfs", env.home().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, kTmpfsSize) != 0) {
    skip_test(std::string("full-disk test: mount -t tmpfs: ") + std::strerror(errno));
  }
  std::string spec = env.write_spec("fulldisk.yaml", trainer_spec());
  std::string filler = env.home() + "/filler";

  // 1. A real run, until it has committed a few checkpoints.
  DtrainProcess submit = env.start({"submit", spec});
  std::string run_dir;
  REQUIRE(wait_until([&] {
    if (env.run_dirs().size() != 1) return false;
    run_dir = env.run_dirs()[0];
    return committed_steps(run_dir + "/events.jsonl").size() >= 2;
  }, 120'000));
  const std::string run_id = run_id_of(run_dir);
  const std::string events_path = run_dir + "/events.jsonl";
  std::vector<int64_t> before_fill = committed_steps(events_path);
  const int64_t good_step = *std::max_element(before_fill.begin(), before_fill.end());

  // 2. The disk fills. The next checkpoint cannot be written: the run fails, and says why.
  CHECK(fill_until_full(filler) == ENOSPC);
  bool ended = submit.wait(120'000);
  REQUIRE_MESSAGE(ended, "dtrain submit did not end after the disk filled");
  CHECK(submit.exit_code != 0);
  std::string said = submit.out() + submit.err();
  CAPTURE(said);
  CHECK(said.find("No space left on device") != std::string::npos);
  CHECK(said.find("internal bug") == std::string::npos);
  CHECK(dtrain::test::wait_until_run_gone(run_id, 10'000).empty());

  // 3. Space is freed. Nothing half-written is left, and the good checkpoint is still there.
  REQUIRE(::unlink(filler.c_str()) == 0);
  check_log_is_whole_lines(events_path);
  CHECK(temp_files(env.home()).empty());
  CHECK(newest_manifest_step(run_dir + "/checkpoints") >= good_step);

  DtrainProcess status = env.run({"status", run_id}, 30'000);
  CHECK(status.exit_code == 0);
  CAPTURE(status.err());
  CHECK(status.out().find(run_id) != std::string::npos);
  CHECK(status.out().find("checkpoint.committed") != std::string::npos);
  CHECK(status.err().find("internal bug") == std::string::npos);

  // 4. `dtrain resume` continues from a checkpoint at least as new as the last one committed
  //    before the disk filled, trains on and commits a newer one; then it is stopped.
  DtrainProcess resume = env.start({"resume", run_id});
  std::string rank0_log = run_dir + "/ranks/0.log";
  int64_t resumed_from = -1;
  bool resumed = wait_until([&] {
    std::string log = read_text(rank0_log);
    size_t at = log.rfind("resumed from checkpoint step-");
    if (at == std::string::npos) return false;
    resumed_from = std::stoll(log.substr(at + std::strlen("resumed from checkpoint step-")));
    return true;
  }, 120'000);
  CHECK_MESSAGE(resumed, "resume did not restore a checkpoint; stderr: " << resume.err());
  CHECK(resumed_from >= good_step);
  bool trained_on = wait_until([&] {
    std::vector<int64_t> steps = committed_steps(events_path);
    return !steps.empty() && *std::max_element(steps.begin(), steps.end()) > resumed_from;
  }, 120'000);
  CHECK_MESSAGE(trained_on, "the resumed run committed no newer checkpoint; stderr: " << resume.err());
  DtrainProcess stop = env.run({"stop", run_id}, 60'000);
  CHECK(stop.exit_code == 0);
  CHECK(resume.wait(60'000));
  CHECK(resume.err().find("internal bug") == std::string::npos);

  CHECK(dtrain::test::wait_until_run_gone(run_id, 10'000).empty());
  check_log_is_whole_lines(events_path);
  CHECK(temp_files(env.home()).empty());
  ::umount2(env.home().c_str(), MNT_DETACH);
}
