// The agent's host health checks (launcher/agent/health_checks.h) on fake sysfs trees, the fake
// NVML, real site commands (sh -c) and a real FIFO standing for a hung checkpoint filesystem.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/agent/health_checks.h"
#include "launcher/agent/health_runner.h"
#include "launcher/agent/process_tree.h"
#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::GpuHealthReadings;
using dtrain::agent::HealthEnvironment;
using dtrain::agent::HostHealthChecker;
using dtrain::agent::NvmlLibrary;
using dtrain::agent::SiteCommandResult;
using dtrain::proto::HealthCheck;
using dtrain::proto::HealthReport;
using dtrain::proto::HealthRequest;
using dtrain::proto::HealthVerdict;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const HealthCheck* find_check(const std::vector<HealthCheck>& checks, const std::string& name) {
  for (const HealthCheck& check : checks) {
    if (check.name == name) return &check;
  }
  return nullptr;
}

/// A file under the temp dir, with its parents.
void put(const dtrain::testing::TempDir& dir, const std::string& relative, const std::string& text) {
  std::string path = dir.path + "/" + relative;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

/// The fake NVML's readings for the scope of one test.
struct FakeNvml {
  dtrain::testing::TempDir dir;
  std::string values;
  explicit FakeNvml(const std::string& text) : values(dir.write("nvml", text)) {
    ::setenv("DTRAIN_FAKE_NVML_VALUES", values.c_str(), 1);
  }
  ~FakeNvml() { ::unsetenv("DTRAIN_FAKE_NVML_VALUES"); }
  void set(const std::string& text) const { std::ofstream(values) << text; }
};

HealthEnvironment environment_with(const std::string& sysfs_root, const std::string& nvml_path) {
  HealthEnvironment environment;
  environment.sysfs_root = sysfs_root;
  environment.nvml_path = nvml_path;
  return environment;
}

HealthRequest request_without_checks() {
  HealthRequest request;
  request.reclaim_wait_ms = 0;
  return request;
}

/// Whether `pid` is gone or a zombie within `timeout_ms` (a SIGKILL is delivered at once but
/// the process takes a moment to exit).
bool ends_within(pid_t pid, int64_t timeout_ms) {
  dtrain::SystemClock clock;
  int64_t deadline = clock.monotonic_ms() + timeout_ms;
  for (;;) {
    std::optional<char> state = dtrain::agent::process_state(pid);
    if (!state || *state == 'Z') return true;
    if (clock.monotonic_ms() >= deadline) return false;
    ::poll(nullptr, 0, 10);
  }
}

}  // namespace

TEST_CASE("GPU health from the fake NVML: pending retirement, remaps and uncorrected ECC fail, hardware throttling warns") {
  FakeNvml fake("gpus=2\nretired_pages_pending=1\nremap_pending=1\nremap_failure=1\necc_uncorrected=3\n"
                "throttle_reasons=0x48\n");
  auto opened = NvmlLibrary::open(DTRAIN_FAKE_NVML, false);
  REQUIRE(opened.ok());
  GpuHealthReadings gpu = (*opened)->read_health(1);
  CHECK(gpu.index == 1);
  CHECK(gpu.retired_pages_pending == true);
  CHECK(gpu.row_remap_pending == true);
  CHECK(gpu.row_remap_failed == true);
  CHECK(gpu.ecc_uncorrected == 3);
  CHECK(gpu.throttle_reasons == 0x48u);

  std::vector<HealthCheck> checks = dtrain::agent::check_gpu_health({gpu}, {});
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].name == "gpu 1");
  CHECK(checks[0].verdict == HealthVerdict::fail);
  CHECK(contains(checks[0].message, "memory pages are waiting to be retired"));
  CHECK(contains(checks[0].message, "a memory row remap is pending"));
  CHECK(contains(checks[0].message, "row remap FAILED"));
  CHECK(contains(checks[0].message, "3 uncorrected ECC error(s)"));
  CHECK(contains(checks[0].message, "HW slowdown, HW thermal slowdown"));
  CHECK(contains(checks[0].message, "nvidia-smi -r -i 1"));

  fake.set("gpus=1\nthrottle_reasons=128\n");
  std::vector<HealthCheck> throttled = dtrain::agent::check_gpu_health({(*opened)->read_health(0)}, {});
  REQUIRE(throttled.size() == 1);
  CHECK(throttled[0].verdict == HealthVerdict::warn);
  CHECK(contains(throttled[0].message, "HW power brake"));

  fake.set("gpus=1\n");
  std::vector<HealthCheck> healthy = dtrain::agent::check_gpu_health({(*opened)->read_health(0)}, {});
  CHECK(healthy[0].verdict == HealthVerdict::ok);
  CHECK(healthy[0].message ==
        "healthy (checked: page retirement, row remapping, uncorrected ECC, NVML's recovery action, clock throttling, Xids)");
}

TEST_CASE("NVML's recommended recovery action (field 230): none passes, a reset or a reboot fails naming it") {
  FakeNvml fake("gpus=1\nrecovery_action=2\n");
  auto opened = NvmlLibrary::open(DTRAIN_FAKE_NVML, false);
  REQUIRE(opened.ok());
  GpuHealthReadings gpu = (*opened)->read_health(0);
  CHECK(gpu.recovery_action == 2u);
  std::vector<HealthCheck> reboot = dtrain::agent::check_gpu_health({gpu}, {});
  REQUIRE(reboot.size() == 1);
  CHECK(reboot[0].verdict == HealthVerdict::fail);
  CHECK(contains(reboot[0].message, "NVML recommends: a node reboot"));
  fake.set("gpus=1\nrecovery_action=1\n");
  CHECK(contains(dtrain::agent::check_gpu_health({(*opened)->read_health(0)}, {})[0].message, "NVML recommends: a GPU reset"));
  fake.set("gpus=1\nrecovery_action=9\n");
  CHECK(dtrain::agent::check_gpu_health({(*opened)->read_health(0)}, {})[0].verdict == HealthVerdict::fail);
  fake.set("gpus=1\nrecovery_action=0\n");
  CHECK(dtrain::agent::check_gpu_health({(*opened)->read_health(0)}, {})[0].verdict == HealthVerdict::ok);
}

TEST_CASE("a GPU whose NVML answers NOT_SUPPORTED for the health readings is not failed for it") {
  FakeNvml fake("gpus=1\nno_health=1\nno_ecc=1\n");
  auto opened = NvmlLibrary::open(DTRAIN_FAKE_NVML, false);
  REQUIRE(opened.ok());
  GpuHealthReadings gpu = (*opened)->read_health(0);
  CHECK_FALSE(gpu.retired_pages_pending.has_value());
  CHECK_FALSE(gpu.row_remap_pending.has_value());
  CHECK_FALSE(gpu.ecc_uncorrected.has_value());
  CHECK_FALSE(gpu.throttle_reasons.has_value());
  CHECK_FALSE(gpu.recovery_action.has_value());
  std::vector<HealthCheck> checks = dtrain::agent::check_gpu_health({gpu}, {});
  CHECK(checks[0].verdict == HealthVerdict::ok);
  CHECK(checks[0].message == "healthy (checked: Xids)");
}

TEST_CASE("Xids since the last check: the catalogue's fatal ones fail their GPU, others warn") {
  CHECK(dtrain::agent::is_fatal_xid(79));
  CHECK(dtrain::agent::is_fatal_xid(48));
  CHECK(dtrain::agent::is_fatal_xid(120));
  CHECK_FALSE(dtrain::agent::is_fatal_xid(13));
  CHECK_FALSE(dtrain::agent::is_fatal_xid(31));
  std::vector<GpuHealthReadings> gpus{{0, false, false, false, 0, 0, 0}, {1, false, false, false, 0, 0, 0}};
  std::vector<HealthCheck> checks = dtrain::agent::check_gpu_health(gpus, {{0, 13, 1}, {1, 79, 2}, {3, 31, 3}});
  REQUIRE(checks.size() == 3);
  CHECK(checks[0].name == "gpu 0");
  CHECK(checks[0].verdict == HealthVerdict::warn);
  CHECK(contains(checks[0].message, "Xid 13 since the last check"));
  CHECK(checks[1].verdict == HealthVerdict::fail);
  CHECK(contains(checks[1].message, "Xid 79 (the GPU has fallen off the bus) since the last check"));
  CHECK(checks[2].name == "gpu 3");  // an Xid for a GPU NVML did not list still says so
  CHECK(checks[2].verdict == HealthVerdict::warn);
}

TEST_CASE("InfiniBand ports from a fake sysfs: a port not ACTIVE fails, link_downed growing warns") {
  dtrain::testing::TempDir root;
  put(root, "sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  put(root, "sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "0\n");
  put(root, "sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  put(root, "sys/class/infiniband/mlx5_1/ports/1/counters/link_downed", "4\n");
  std::map<std::string, int64_t> seen;
  std::vector<HealthCheck> first = dtrain::agent::check_infiniband(root.path, seen);
  REQUIRE(first.size() == 2);
  CHECK(first[0].name == "infiniband mlx5_0/1");
  CHECK(first[0].verdict == HealthVerdict::ok);
  CHECK(first[0].message == "4: ACTIVE, link_downed 0");
  CHECK(first[1].name == "infiniband mlx5_1/1");
  CHECK(first[1].verdict == HealthVerdict::fail);
  CHECK(contains(first[1].message, "port mlx5_1/1 is 1: DOWN, not 4: ACTIVE"));
  CHECK(contains(first[1].message, "ibstat mlx5_1"));

  // The first check has no baseline: only what changed since it counts.
  put(root, "sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "2\n");
  std::vector<HealthCheck> second = dtrain::agent::check_infiniband(root.path, seen);
  CHECK(second[0].verdict == HealthVerdict::warn);
  CHECK(contains(second[0].message, "the link went down 2 time(s) since the last check"));
  std::vector<HealthCheck> third = dtrain::agent::check_infiniband(root.path, seen);
  CHECK(third[0].verdict == HealthVerdict::ok);

  // Down AND flapping still fails.
  put(root, "sys/class/infiniband/mlx5_1/ports/1/counters/link_downed", "5\n");
  std::vector<HealthCheck> fourth = dtrain::agent::check_infiniband(root.path, seen);
  CHECK(fourth[1].verdict == HealthVerdict::fail);
  CHECK(contains(fourth[1].message, "went down 1 time(s)"));

  // A port switched off on purpose is not a fault.
  put(root, "sys/class/infiniband/mlx5_2/ports/1/state", "1: DOWN\n");
  put(root, "sys/class/infiniband/mlx5_2/ports/1/phys_state", "3: Disabled\n");
  std::vector<HealthCheck> fifth = dtrain::agent::check_infiniband(root.path, seen);
  REQUIRE(fifth.size() == 3);
  CHECK(fifth[2].verdict == HealthVerdict::ok);
  CHECK(contains(fifth[2].message, "disabled"));

  dtrain::testing::TempDir no_infiniband;
  CHECK(dtrain::agent::check_infiniband(no_infiniband.path, seen).empty());
}

TEST_CASE("the master's interface: loopback's operstate from a fake sysfs, and a master that does not resolve") {
  dtrain::testing::TempDir root;
  put(root, "sys/class/net/lo/operstate", "unknown\n");
  HealthCheck up = dtrain::agent::check_master_interface(root.path, "127.0.0.1");
  CHECK(up.name == "master interface");
  CHECK(up.verdict == HealthVerdict::ok);
  CHECK(contains(up.message, "lo is unknown"));

  put(root, "sys/class/net/lo/operstate", "down\n");
  HealthCheck down = dtrain::agent::check_master_interface(root.path, "127.0.0.1");
  CHECK(down.verdict == HealthVerdict::fail);
  CHECK(contains(down.message, "lo is down"));
  CHECK(contains(down.message, "ip link set lo up"));

  dtrain::testing::TempDir empty;
  HealthCheck unreadable = dtrain::agent::check_master_interface(empty.path, "127.0.0.1");
  CHECK(unreadable.verdict == HealthVerdict::warn);

  HealthCheck unresolved = dtrain::agent::check_master_interface(root.path, "no-such-master.invalid");
  CHECK(unresolved.verdict == HealthVerdict::fail);
  CHECK(contains(unresolved.message, "the master 'no-such-master.invalid' does not resolve here"));
}

TEST_CASE("the checkpoint directory: created when missing, written, and its free space") {
  dtrain::testing::TempDir dir;
  std::string missing = dir.path + "/not/yet/there";
  HealthCheck check = dtrain::agent::check_checkpoint_dir(missing, 5'000, 0);
  CHECK(check.name == "checkpoint dir");
  CHECK(check.verdict == HealthVerdict::ok);
  CHECK(contains(check.message, "writable"));
  CHECK(std::filesystem::is_directory(missing));
  CHECK_FALSE(std::filesystem::exists(missing + "/" + dtrain::agent::kCheckpointProbeName));

  HealthCheck full = dtrain::agent::check_checkpoint_dir(missing, 5'000, int64_t{1} << 40);
  CHECK(full.verdict == HealthVerdict::fail);
  CHECK(contains(full.message, "MiB free in"));
  CHECK(contains(full.message, "health.min_free"));

  if (::geteuid() != 0) {
    std::string read_only = dir.path + "/read-only";
    std::filesystem::create_directories(read_only);
    ::chmod(read_only.c_str(), 0500);
    HealthCheck refused = dtrain::agent::check_checkpoint_dir(read_only, 5'000, 0);
    CHECK(refused.verdict == HealthVerdict::fail);
    CHECK(contains(refused.message, "cannot write in"));
    ::chmod(read_only.c_str(), 0700);
  }
}

TEST_CASE("a checkpoint directory whose write hangs (a FIFO as the probe file) fails within its limit") {
  dtrain::testing::TempDir dir;
  std::string fifo = dir.path + "/" + dtrain::agent::kCheckpointProbeName;
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  dtrain::SystemClock clock;
  HealthCheck hung = dtrain::agent::check_checkpoint_dir(dir.path, 300, 0);
  CHECK(hung.verdict == HealthVerdict::fail);
  CHECK(contains(hung.message, "did not answer within 300ms"));
  CHECK(contains(hung.message, "health.write_timeout"));
  // While that write still hangs, the next check does not leave a second thread beside it.
  HealthCheck again = dtrain::agent::check_checkpoint_dir(dir.path, 5'000, 0);
  CHECK(again.verdict == HealthVerdict::fail);
  CHECK(contains(again.message, "still has not returned"));
  // The filesystem "answers": a reader opens the FIFO; the probe writes, closes, and is done.
  dtrain::UniqueFd reader(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  REQUIRE(reader.valid());
  pollfd entry{reader.get(), POLLIN, 0};
  std::string drained;
  for (bool closed = false; !closed;) {
    REQUIRE(::poll(&entry, 1, 10'000) > 0);
    bool would_block = false;
    dtrain::Result<size_t> got = dtrain::read_some(reader.get(), drained, &would_block);
    closed = !got || (*got == 0 && !would_block);
  }
  CHECK(drained.size() == 4096);
}

TEST_CASE("the site command's exit codes: 0 ok, 1 fail with its output, others and signals warn") {
  auto judged = [](const std::string& command, int64_t timeout_ms = 10'000) {
    return dtrain::agent::judge_site_command(dtrain::agent::run_site_command(command, timeout_ms), timeout_ms);
  };
  HealthCheck ok = judged("echo all good");
  CHECK(ok.name == "site command");
  CHECK(ok.verdict == HealthVerdict::ok);
  CHECK(ok.message == "exit 0: all good");

  HealthCheck failed = judged("echo 'GPU 3: row remap pending'; echo 'see nhc.log' >&2; exit 1");
  CHECK(failed.verdict == HealthVerdict::fail);
  CHECK(failed.message == "unhealthy (exit 1): GPU 3: row remap pending | see nhc.log");

  HealthCheck other = judged("echo confused; exit 2");
  CHECK(other.verdict == HealthVerdict::warn);
  CHECK(contains(other.message, "exited with code 2"));
  CHECK(contains(other.message, "fail open"));
  CHECK(contains(other.message, "confused"));

  HealthCheck signalled = judged("kill -KILL $$");
  CHECK(signalled.verdict == HealthVerdict::warn);
  CHECK(contains(signalled.message, "killed by SIGKILL"));

  HealthCheck garbage = judged("printf 'ok\\000\\377\\001'; exit 1");
  CHECK(garbage.verdict == HealthVerdict::warn);
  CHECK(contains(garbage.message, "its output is not text"));

  HealthCheck missing = judged("/nonexistent/health-check");
  CHECK(missing.verdict == HealthVerdict::warn);
  CHECK(contains(missing.message, "exited with code 127"));
}

TEST_CASE("a site command past its time limit is killed with everything it started, and warns") {
  dtrain::testing::TempDir dir;
  std::string pid_file = dir.path + "/child.pid";
  SiteCommandResult ran = dtrain::agent::run_site_command(
      "echo started; sleep 30 & echo $! > " + pid_file + "; wait", 300);
  CHECK(ran.ending == SiteCommandResult::Ending::timed_out);
  HealthCheck check = dtrain::agent::judge_site_command(ran, 300);
  CHECK(check.verdict == HealthVerdict::warn);
  CHECK(contains(check.message, "did not finish within 300ms (killed)"));
  CHECK(contains(check.message, "started"));
  dtrain::Result<std::string> pid_text = dtrain::read_file(pid_file);
  REQUIRE(pid_text.ok());
  pid_t background = static_cast<pid_t>(std::stol(*pid_text));
  CHECK(ends_within(background, 5'000));
}

TEST_CASE("a site command stops at once when the agent stops the checks") {
  dtrain::UniqueFd stop(::eventfd(1, EFD_CLOEXEC));
  SiteCommandResult ran = dtrain::agent::run_site_command("sleep 30", 60'000, stop.get());
  CHECK(ran.ending == SiteCommandResult::Ending::stopped);
  CHECK(dtrain::agent::judge_site_command(ran, 60'000).verdict == HealthVerdict::warn);
}

TEST_CASE("the site diagnose: exit 0 ok, another exit fails, a timeout warns") {
  auto diagnosed = [](const std::string& command, int64_t timeout_ms = 10'000) {
    return dtrain::agent::judge_site_diagnose(dtrain::agent::run_site_command(command, timeout_ms), timeout_ms);
  };
  HealthCheck passed = diagnosed("echo 'Diagnostic Pass'");
  CHECK(passed.name == "site diagnose");
  CHECK(passed.verdict == HealthVerdict::ok);
  HealthCheck failed = diagnosed("echo 'Memory: Fail'; exit 226");
  CHECK(failed.verdict == HealthVerdict::fail);
  CHECK(failed.message == "failed (exit 226): Memory: Fail");
  HealthCheck slow = diagnosed("sleep 30", 200);
  CHECK(slow.verdict == HealthVerdict::warn);
  CHECK(contains(slow.message, "did not finish within 200ms"));
}

TEST_CASE("text or not: UTF-8 and tabs are text, NUL, control bytes and broken UTF-8 are not") {
  CHECK(dtrain::agent::looks_like_text("plain\ttext\r\n"));
  CHECK(dtrain::agent::looks_like_text("gpu 3 température élevée ✓"));
  CHECK(dtrain::agent::looks_like_text(""));
  CHECK_FALSE(dtrain::agent::looks_like_text(std::string("a\0b", 3)));
  CHECK_FALSE(dtrain::agent::looks_like_text("\x1b[31mred"));
  CHECK_FALSE(dtrain::agent::looks_like_text("\xff\xfe"));
  CHECK_FALSE(dtrain::agent::looks_like_text("cut \xe2\x9c"));
}

TEST_CASE("leftover GPU memory of another process is waited for: freed within the wait is ok") {
  FakeNvml fake("gpus=2\nprocess=0:999999:2048\nprocess=1:" + std::to_string(::getpid()) + ":40000\n");
  HealthEnvironment environment = environment_with("", DTRAIN_FAKE_NVML);
  int pauses = 0;
  environment.pause = [&](int64_t) {
    ++pauses;
    fake.set("gpus=2\nprocess=1:" + std::to_string(::getpid()) + ":40000\n");  // the old job exits
    return true;
  };
  HostHealthChecker checker(environment);
  HealthRequest request;
  request.reclaim_wait_ms = 30'000;
  request.leftover_gpu_memory_mb = 512;
  HealthReport report = checker.run(request, "start", false);
  CHECK(pauses == 1);
  const HealthCheck* gpu0 = find_check(report.checks, "gpu 0 memory");
  REQUIRE(gpu0 != nullptr);
  CHECK(gpu0->verdict == HealthVerdict::ok);
  CHECK(contains(gpu0->message, "no other process holds memory on it"));
  // This run's own process is not leftover, however much it holds.
  const HealthCheck* gpu1 = find_check(report.checks, "gpu 1 memory");
  REQUIRE(gpu1 != nullptr);
  CHECK(gpu1->verdict == HealthVerdict::ok);
}

TEST_CASE("leftover GPU memory still held after the wait fails, naming the pid and MiB") {
  FakeNvml fake("gpus=1\nprocess=0:999999:2048\nprocess=0:999998:100\n");
  HealthEnvironment environment = environment_with("", DTRAIN_FAKE_NVML);
  HostHealthChecker checker(environment);
  HealthRequest request;
  request.reclaim_wait_ms = 300;
  request.leftover_gpu_memory_mb = 512;
  HealthReport report = checker.run(request, "start", false);
  const HealthCheck* gpu0 = find_check(report.checks, "gpu 0 memory");
  REQUIRE(gpu0 != nullptr);
  CHECK(gpu0->verdict == HealthVerdict::fail);
  CHECK(contains(gpu0->message, "2148 MiB held by processes that are not this run's: pid 999999 (2048 MiB), "
                                "pid 999998 (100 MiB), still after waiting"));
  CHECK(contains(gpu0->message, "health.leftover_gpu_memory: 512 MiB"));
  CHECK(report.verdict() == HealthVerdict::fail);
}

TEST_CASE("leftover GPU memory without NVML's process list is not failed on the device's total") {
  FakeNvml fake("gpus=1\nmemory_used_mb=70000\nno_process_list=1\n");
  HostHealthChecker checker(environment_with("", DTRAIN_FAKE_NVML));
  HealthReport report = checker.run(request_without_checks(), "start", false);
  const HealthCheck* gpu0 = find_check(report.checks, "gpu 0 memory");
  REQUIRE(gpu0 != nullptr);
  CHECK(gpu0->verdict == HealthVerdict::warn);
  CHECK(contains(gpu0->message, "not checked"));
}

TEST_CASE("the checker: checks in order, none for what the host lacks, a site command's failure fails the report") {
  dtrain::testing::TempDir root;
  put(root, "sys/class/net/lo/operstate", "unknown\n");
  put(root, "sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  FakeNvml fake("gpus=1\n");
  HostHealthChecker checker(environment_with(root.path, DTRAIN_FAKE_NVML));
  HealthRequest request = request_without_checks();
  request.master_addr = "127.0.0.1";
  request.checkpoint_dir = root.path + "/checkpoints";
  request.min_free_mb = 0;
  request.command = "echo node drained >&2; exit 1";
  request.diagnose = "echo diagnosed";
  HealthReport report = checker.run(request, "after failure", true, {{0, 94, 1}});
  CHECK(report.moment == "after failure");
  std::vector<std::string> names;
  for (const HealthCheck& check : report.checks) names.push_back(check.name);
  CHECK(names == std::vector<std::string>{"gpu 0", "gpu 0 memory", "infiniband mlx5_0/1", "master interface",
                                          "checkpoint dir", "site command", "site diagnose"});
  CHECK(report.checks[0].verdict == HealthVerdict::fail);  // Xid 94
  CHECK(report.checks[5].message == "unhealthy (exit 1): node drained");
  CHECK(report.verdict() == HealthVerdict::fail);
  CHECK(report.ms >= 0);

  // No NVML, no InfiniBand, nothing asked: nothing to report.
  dtrain::testing::TempDir bare;
  HostHealthChecker nothing(environment_with(bare.path, "/nonexistent/libnvidia-ml.so.1"));
  CHECK(nothing.run(request_without_checks(), "join", false).checks.empty());
}

TEST_CASE("a report keeps within the protocol's bounds: the worst checks first when some must go") {
  std::vector<HealthCheck> checks;
  for (int i = 0; i < 80; ++i) checks.push_back({"infiniband mlx5_" + std::to_string(i) + "/1", HealthVerdict::ok, "4: ACTIVE"});
  checks[70].verdict = HealthVerdict::fail;
  checks[75].verdict = HealthVerdict::warn;
  checks[1].name = std::string(100, 'n');
  checks[2].message = std::string(5000, 'm');
  std::vector<HealthCheck> bounded = dtrain::agent::bound_health_checks(checks);
  REQUIRE(bounded.size() == dtrain::proto::kMaxHealthChecks);
  CHECK(bounded[0].name == "infiniband mlx5_70/1");
  CHECK(bounded[1].name == "infiniband mlx5_75/1");
  CHECK(bounded.back().name == "more checks");
  CHECK(bounded.back().message == "17 more checks not listed, the worst of them ok");
  for (const HealthCheck& check : bounded) {
    CHECK(check.name.size() <= dtrain::proto::kMaxHealthNameBytes);
    CHECK(check.message.size() <= dtrain::proto::kMaxHealthMessageBytes);
  }
}

TEST_CASE("the runner: replies come out through ready_fd with their ids, in order") {
  dtrain::testing::TempDir root;
  HealthRequest request = request_without_checks();
  request.command = "echo checked";
  dtrain::agent::HealthRunner runner(request, environment_with(root.path, ""));
  runner.queue({5, "join", false, {}, {}});
  runner.queue({6, "after failure", false, {}, {}});
  std::vector<dtrain::proto::HealthReply> replies;
  while (replies.size() < 2) {
    pollfd ready{runner.ready_fd(), POLLIN, 0};
    REQUIRE(::poll(&ready, 1, 30'000) == 1);
    for (dtrain::proto::HealthReply& reply : runner.take_replies()) replies.push_back(std::move(reply));
  }
  CHECK(replies[0].id == 5);
  CHECK(replies[0].report.moment == "join");
  CHECK(replies[1].id == 6);
  CHECK(replies[1].report.moment == "after failure");
  REQUIRE(replies[1].report.checks.size() == 1);
  CHECK(replies[1].report.checks[0].message == "exit 0: checked");
}

TEST_CASE("the runner stops at once with a site command running, and the command ends with it") {
  dtrain::testing::TempDir root;
  std::string pid_file = root.path + "/command.pid";
  HealthRequest request = request_without_checks();
  request.command = "echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file + "; exec sleep 600";
  request.command_timeout_ms = 600'000;
  pid_t command = 0;
  {
    dtrain::agent::HealthRunner runner(request, environment_with(root.path, ""));
    runner.queue({1, "start", false, {}, {}});
    dtrain::SystemClock clock;
    for (int64_t deadline = clock.monotonic_ms() + 30'000; command == 0 && clock.monotonic_ms() < deadline;) {
      if (dtrain::Result<std::string> text = dtrain::read_file(pid_file)) command = static_cast<pid_t>(std::stol(*text));
      else ::poll(nullptr, 0, 10);
    }
    REQUIRE(command > 0);
  }  // the runner goes: the command is killed, the thread returns
  CHECK(ends_within(command, 5'000));
}
