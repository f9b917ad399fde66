// The host-level faults' inputs and scripts, without a cluster: partition-host must be told how
// to cut (commands, or the opt-in firewall) and says how when it is not; drill.yaml's
// `partition:` keys are checked with file:line; the user's cut/heal commands get {host}; the
// firewall script refuses without $SSH_CLIENT or a firewall tool, stops with nft's message when
// the kernel check refuses the rules, and with a stand-in `nft` checks, adds and deletes exactly
// its rules by itself; the heal check passes only once the table is gone; the process check
// finds a run's process and forgets it once dead; host faults and kill-supervisor are graded on
// their own terms; configs/drill-partition.yaml shows both partition methods and loads.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/child_process.h"
#include "launcher/drill/fault.h"
#include "launcher/drill/grading.h"
#include "tests/unit/typed_events.h"
#include "launcher/drill/partition.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/spec/drill_spec.h"

using namespace dtrain;
using dtrain::testing::typed;
using namespace dtrain::drill;
using dtrain::hosts::still_running_script;
using nlohmann::json;

namespace {

struct ScratchDir {
  ScratchDir() {
    char pattern[] = "/tmp/dtrain-drill-host-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string path;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool poll_until(const std::function<bool()>& done, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

spec::DrillSpecResult drill_with_fault(const std::string& fault_yaml) {
  return spec::parse_drill_spec("version: 1\njob: {version: 1, worker: {command: [true]}}\nfaults:\n  - " + fault_yaml + "\n",
                                "drill.yaml", ".");
}

}  // namespace

TEST_CASE("partition-host is refused until the user picks how to cut, and the firewall only by opt-in") {
  Fault partition = *parse_fault("partition-host:gpu02");
  Status refused = check_partition_settings(partition, "--fault partition-host:gpu02");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == ErrorKind::user);
  CHECK(refused.error().message.find("--fault partition-host:gpu02: partition-host needs a way to cut gpu02") == 0);
  CHECK(refused.error().message.find("--allow-firewall") != std::string::npos);
  CHECK(refused.error().message.find("--cut-command") != std::string::npos);

  partition.partition = PartitionMethod::firewall;
  CHECK(check_partition_settings(partition, "x"));
  partition.cut_command = "down {host}";
  CHECK(check_partition_settings(partition, "x").error().message.find("not both") != std::string::npos);

  partition.partition = PartitionMethod::commands;
  CHECK(check_partition_settings(partition, "x").error().message.find("the heal command is missing") !=
        std::string::npos);
  partition.heal_command = "up {host}";
  CHECK(check_partition_settings(partition, "x"));

  Fault kill = *parse_fault("kill-host:gpu02");
  CHECK(check_partition_settings(kill, "x"));
  kill.cut_command = "down {host}";
  CHECK(check_partition_settings(kill, "x").error().message.find("only partition-host") != std::string::npos);
}

TEST_CASE("drill.yaml partition: commands, the firewall opt-in, and every mistake with its line") {
  spec::DrillSpecResult commands = drill_with_fault(
      "{fault: partition-host, target: h2, partition: {cut: 'tc partition {host}', heal: 'tc heal {host}', "
      "duration: 90s}}");
  REQUIRE_MESSAGE(commands.ok(), commands.message());
  REQUIRE(commands.spec->faults[0].partition);
  CHECK(commands.spec->faults[0].partition->method == "commands");
  CHECK(commands.spec->faults[0].partition->cut == "tc partition {host}");
  CHECK(commands.spec->faults[0].partition->duration == Millis(90'000));

  spec::DrillSpecResult firewall = drill_with_fault("{fault: partition-host, target: h2, partition: {method: firewall}}");
  REQUIRE_MESSAGE(firewall.ok(), firewall.message());
  CHECK(firewall.spec->faults[0].partition->method == "firewall");

  spec::DrillSpecResult none = drill_with_fault("{fault: partition-host, target: h2}");
  REQUIRE_FALSE(none.ok());
  CHECK(none.message().find("drill.yaml:4:") != std::string::npos);
  CHECK(none.message().find("method: firewall") != std::string::npos);

  CHECK(drill_with_fault("{fault: partition-host, target: h2, partition: {method: iptables}}").message().find(
            "'iptables' is not a partition method") != std::string::npos);
  CHECK(drill_with_fault("{fault: partition-host, target: h2, partition: {cut: x}}").message().find(
            "heal is missing") != std::string::npos);
  CHECK(drill_with_fault("{fault: partition-host, target: h2, partition: {method: firewall, cut: x}}").message().find(
            "takes no cut/heal") != std::string::npos);
  CHECK(drill_with_fault("{fault: kill-host, target: h2, partition: {method: firewall}}").message().find(
            "only partition-host takes `partition`") != std::string::npos);
  CHECK(drill_with_fault("{fault: partition-host, target: h2, partition: {metod: firewall}}").message().find(
            "did you mean 'method'?") != std::string::npos);
}

TEST_CASE("cut and heal commands get the host name — a hostile one is quoted") {
  CHECK(expand_host_command("testcluster.sh partition {host}", "dt-h2") == "testcluster.sh partition dt-h2");
  CHECK(expand_host_command("a {host} b {host}", "gpu01.example") == "a gpu01.example b gpu01.example");
  CHECK(expand_host_command("down {host}", "x; rm -rf /") == "down 'x; rm -rf /'");
  CHECK(default_partition_duration(Millis(2000), Millis(2000)) == Millis(66'000));
  CHECK(default_partition_duration(Millis(10'000), Millis(10'000)) == Millis(90'000));
}

namespace {

/// A bin directory with only what the firewall scripts need; add_tool() puts stand-ins in it.
struct ToolBox {
  ToolBox() {
    std::filesystem::create_directories(bin);
    for (const char* tool : {"id", "hostname", "sleep", "setsid", "nohup", "cat", "date", "rm"}) {
      std::string found = std::string("/usr/bin/") + tool;
      if (!std::filesystem::exists(found)) found = std::string("/bin/") + tool;
      std::filesystem::create_symlink(found, bin + "/" + tool);
    }
  }
  void add_tool(const std::string& name, const std::string& body) const {
    {
      std::ofstream out(bin + "/" + name);
      out << "#!/bin/sh\n" << body;
    }
    std::filesystem::permissions(bin + "/" + name, std::filesystem::perms::owner_all);
  }
  Result<CommandOutput> run(const std::string& script, const std::string& env) const {
    return run_command({"/usr/bin/env", "-i", "PATH=" + bin, "TMPDIR=" + dir.path, env, "/bin/sh", "-c", script},
                       Millis(10'000));
  }
  ScratchDir dir;
  std::string bin = dir.path + "/bin";
  std::string log = dir.path + "/nft.log";
};

}  // namespace

TEST_CASE("the firewall script refuses without SSH_CLIENT or a firewall tool, and heals itself") {
  ToolBox box;
  std::string script = firewall_cut_script("dtrain_drill_t1", Millis(50), Millis(100));
  CHECK(script.find("nft -c -f -") != std::string::npos);
  CHECK(script.find("nft delete table inet dtrain_drill_t1") != std::string::npos);

  Result<CommandOutput> no_client = box.run(script, "SSH_CLIENT=");
  REQUIRE(no_client);
  CHECK(no_client->exit_code == 3);
  if (::geteuid() != 0) return;  // the rest needs the script's root check to pass
  Result<CommandOutput> no_tool = box.run(script, "SSH_CLIENT=10.77.0.2 40000 22");
  REQUIRE(no_tool);
  CHECK(no_tool->exit_code == 4);
  CHECK(no_tool->err.find("neither nft nor iptables") != std::string::npos);

  // A stand-in nft that records its arguments and, for -f, the rules it was given (and that
  // has no table to list: the heal check below asks).
  box.add_tool("nft", "case \"$*\" in list*) exit 1;; esac\necho \"$*\" >> " + box.log +
                          "\ncase \"$*\" in *'-f -') cat >> " + box.log + ";; esac\n");
  Result<CommandOutput> cut = box.run(script, "SSH_CLIENT=10.77.0.2 40000 22");
  REQUIRE(cut);
  CHECK(cut->exit_code == 0);
  CHECK(cut->out == "cut 10.77.0.2 via nft\n");
  REQUIRE(poll_until([&] { return read_all(box.log).find("delete table") != std::string::npos; }, 10'000));
  std::string calls = read_all(box.log);
  INFO(calls);
  // Checked by the kernel first (while the drill still hears the answer), then applied as one
  // transaction, then deleted: nothing else.
  std::string rules = "table inet dtrain_drill_t1 {\n"
                      "  chain input { type filter hook input priority -300; policy accept; ip saddr 10.77.0.2 drop; }\n"
                      "  chain output { type filter hook output priority -300; policy accept; ip daddr 10.77.0.2 drop; }\n"
                      "}\n";
  CHECK(calls == "-c -f -\n" + rules + "-f -\n" + rules + "delete table inet dtrain_drill_t1\n");

  // The helper stamped the moment its rules went in; the heal check hands it back, once.
  std::string stamp = read_all(box.dir.path + "/dtrain_drill_t1.cut");
  Result<CommandOutput> checked = box.run(firewall_check_script("dtrain_drill_t1"), "SSH_CLIENT=10.77.0.2 40000 22");
  REQUIRE(checked);
  CHECK(checked->exit_code == 0);
  std::optional<int64_t> cut_at = parse_cut_at(checked->out);
  REQUIRE_MESSAGE(cut_at, checked->out);
  CHECK(std::to_string(*cut_at) + "\n" == stamp);
  CHECK(std::abs(*cut_at - SystemClock().wall_ms()) < 60'000);
  CHECK_FALSE(std::filesystem::exists(box.dir.path + "/dtrain_drill_t1.cut"));
  CHECK_FALSE(parse_cut_at(box.run(firewall_check_script("dtrain_drill_t1"), "SSH_CLIENT=10.77.0.2 40000 22")->out));
  CHECK_FALSE(parse_cut_at("cut_at=12x\n"));
}

TEST_CASE("the firewall script stops with the tool's message when nft refuses the rules, and cuts nothing") {
  if (::geteuid() != 0) return;  // the script's root check comes first
  ToolBox box;
  box.add_tool("nft", "echo \"$*\" >> " + box.log + "\necho 'Error: Could not process rule: No such file or directory' >&2\nexit 1\n");
  Result<CommandOutput> refused =
      box.run(firewall_cut_script("dtrain_drill_t2", Millis(50), Millis(100)), "SSH_CLIENT=10.77.0.2 40000 22");
  REQUIRE(refused);
  CHECK(refused->exit_code == 6);
  CHECK(refused->err.find("refused the rules: Error: Could not process rule") != std::string::npos);
  CHECK(read_all(box.log) == "-c -f -\n");
}

TEST_CASE("the heal check passes only once the drill's table is gone") {
  ToolBox box;
  std::string check = firewall_check_script("dtrain_drill_t3");
  box.add_tool("nft", "[ -e " + box.dir.path + "/table ] || exit 1\necho 'table inet dtrain_drill_t3 {}'\n");
  std::ofstream(box.dir.path + "/table") << "present";
  Result<CommandOutput> cut = box.run(check, "SSH_CLIENT=10.77.0.2 40000 22");
  REQUIRE(cut);
  CHECK(cut->exit_code == 1);
  CHECK(cut->out.find("nft table inet dtrain_drill_t3") != std::string::npos);
  std::filesystem::remove(box.dir.path + "/table");
  Result<CommandOutput> healed = box.run(check, "SSH_CLIENT=10.77.0.2 40000 22");
  REQUIRE(healed);
  CHECK(healed->exit_code == 0);
  CHECK(healed->out.empty());
}

TEST_CASE("the process check names a live process of the run and forgets it once it is dead") {
  pid_t child = ::fork();
  if (child == 0) {
    ::setenv("DTRAIN_RUN_ID", "run-probe-1", 1);
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(child > 0);
  auto check = [&](const std::string& run_id) {
    Result<CommandOutput> out = run_command({"/bin/sh", "-c", still_running_script({child, 999999}, run_id)}, Millis(10'000));
    REQUIRE(out);
    CHECK(out->exit_code == 0);
    return out->out;
  };
  CHECK(poll_until([&] { return check("run-probe-1") == std::to_string(child) + "\n"; }, 5000));
  CHECK(check("run-other") == "");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(check("run-probe-1") == "");
}

namespace {

constexpr int64_t kAt = 1'795'000'000'000;

json at(int64_t offset_ms, json event) {
  event["ts"] = format_timestamp_utc(kAt + offset_ms);
  return event;
}

Injection host_injection(const std::string& fault) {
  Injection injection;
  injection.fault = *parse_fault(fault);
  injection.wall_ms = kAt;
  injection.generation = 0;
  injection.hosts = {"h1", "h2", "h3"};
  return injection;
}

std::vector<json> shrink(const std::vector<std::string>& next_hosts) {
  return {at(40, {{"ev", "host.lost"}, {"host", "h3"}, {"reason", "channel closed"}}),
          at(41, {{"ev", "failure.detected"}, {"kind", "host.lost"}, {"host", "h3"}}),
          at(90, {{"ev", "resources.released"}, {"gen", 0}, {"host", "h1"}, {"remaining", 0}}),
          at(95, {{"ev", "resources.released"}, {"gen", 0}, {"host", "h2"}, {"remaining", 0}}),
          at(100, {{"ev", "plan.generation"}, {"gen", 1}, {"world_size", 4}, {"hosts", next_hosts}}),
          at(700, {{"ev", "recovery.completed"}, {"kind", "host.lost"}, {"resume_step", 100}, {"steps_lost", 20}})};
}

const CheckResult* find_check(const FaultVerdict& verdict, const std::string& name) {
  for (const CheckResult& check : verdict.checks) {
    if (check.name == name) return &check;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("kill-host passes when the host is lost and left out — the lost host owes no release") {
  GradeContext context;
  context.final_state = "running";
  context.extra_checks = {{"nothing left on h3", true, "gone"}};
  FaultVerdict pass = grade_fault(host_injection("kill-host:h3"), typed(shrink({"h1", "h2"})), {}, context);
  CHECK_MESSAGE(pass.passed(), to_json(pass).dump(2));
  CHECK(pass.detect_ms == 41);
  CHECK(pass.recover_ms == 700);
  CHECK(pass.resources_released == true);
  REQUIRE(find_check(pass, "host left out of the new generation"));
  CHECK(find_check(pass, "host left out of the new generation")->detail.find("4 rank(s) on h1, h2") != std::string::npos);

  FaultVerdict kept = grade_fault(host_injection("kill-host:h3"), typed(shrink({"h1", "h2", "h3"})), {}, context);
  CHECK_FALSE(kept.passed());
  CHECK_FALSE(find_check(kept, "host left out of the new generation")->met);

  context.extra_checks = {{"nothing left on h3", false, "still running there: pid 77"}};
  FaultVerdict leftover = grade_fault(host_injection("partition-host:h3"), typed(shrink({"h1", "h2"})), {}, context);
  CHECK_FALSE(leftover.passed());
  CHECK(leftover.missed().front().find("nothing left on h3 (still running there: pid 77)") == 0);

  std::vector<json> other_host = shrink({"h1", "h3"});
  other_host[0]["host"] = "h2";
  context.extra_checks.clear();
  CHECK_FALSE(find_check(grade_fault(host_injection("kill-host:h3"), typed(other_host), {}, context), "host lost")->met);
}

TEST_CASE("kill-supervisor is detected by the drill's fence check and recovered by the resumed supervisor") {
  Injection injection;
  injection.fault = *parse_fault("kill-supervisor");
  injection.wall_ms = kAt;
  injection.generation = 0;
  injection.hosts = {"localhost"};
  std::vector<json> events = {
      at(2500, {{"ev", "run.resumed"}, {"gen", 1}}),
      at(2510, {{"ev", "failure.detected"}, {"kind", "supervisor.lost"}}),
      at(2600, {{"ev", "plan.generation"}, {"gen", 1}, {"hosts", {"localhost"}}}),
      at(3100, {{"ev", "recovery.completed"}, {"kind", "supervisor.lost"}, {"resume_step", 250}, {"steps_lost", 30}})};
  GradeContext context;
  context.final_state = "running";
  context.detected_wall_ms = kAt + 120;
  context.detected_by = "agents fenced";
  FaultVerdict verdict = grade_fault(injection, typed(events), {Millis(5000), Millis(10'000), 100}, context);
  CHECK_MESSAGE(verdict.passed(), to_json(verdict).dump(2));
  CHECK(verdict.detect_ms == 120);
  CHECK(verdict.detected_kind == "agents fenced");
  CHECK(verdict.recover_ms == 3100);
  CHECK(verdict.steps_lost == 30);

  context.detected_wall_ms.reset();
  FaultVerdict unfenced = grade_fault(injection, typed(events), {}, context);
  CHECK_FALSE(unfenced.passed());
  CHECK(find_check(unfenced, "failure detected")->detail == "the agents never fenced");

  context.detected_wall_ms = kAt + 120;
  events.back()["kind"] = "worker.exit";
  CHECK_FALSE(grade_fault(injection, typed(events), {}, context).passed());
}

TEST_CASE("the example configs/drill-partition.yaml is a valid drill spec with both partition methods") {
  spec::DrillSpecResult example = spec::load_drill_spec(std::string(DTRAIN_SOURCE_DIR) + "/configs/drill-partition.yaml");
  REQUIRE_MESSAGE(example.ok(), example.message());
  REQUIRE(example.spec->faults.size() == 2);
  const spec::DrillFaultEntry& commands = example.spec->faults[0];
  REQUIRE(commands.partition);
  CHECK(commands.partition->method == "commands");
  CHECK(expand_host_command(commands.partition->cut, commands.target) == "switchctl port-down gpu02");
  CHECK(commands.partition->duration == Millis(120'000));
  const spec::DrillFaultEntry& firewall = example.spec->faults[1];
  REQUIRE(firewall.partition);
  CHECK(firewall.partition->method == "firewall");
  CHECK(firewall.partition->duration == Millis(90'000));
}
