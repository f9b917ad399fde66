// What a drill reads and writes besides the run: --fault text, drill.yaml and --slo files,
// the drill history, event timestamps, and the checkpoint damage done on disk.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/drill/drill_history.h"
#include "launcher/drill/fault.h"
#include "launcher/drill/injector.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/drill_spec.h"

using namespace dtrain;
using namespace dtrain::drill;

namespace {

struct ScratchDir {
  ScratchDir() {
    char pattern[] = "/tmp/dtrain-drill-unit-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string path;
};

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("--fault parses KIND[:TARGET] and explains every mistake") {
  Result<Fault> kill = parse_fault("kill-rank:3");
  REQUIRE(kill);
  CHECK(kill->kind == FaultKind::kill_rank);
  CHECK(kill->rank == 3);
  CHECK(kill->label() == "kill-rank:3");
  Result<Fault> corrupt = parse_fault("corrupt-checkpoint");
  REQUIRE(corrupt);
  CHECK(corrupt->rank == 0);
  CHECK(parse_fault("slow-storage"));
  CHECK(is_implemented(parse_fault("kill-host:gpu02")->kind));
  CHECK(is_implemented(parse_fault("kill-supervisor")->kind));

  Result<Fault> typo = parse_fault("kill-rnak:1");
  REQUIRE_FALSE(typo);
  CHECK(typo.error().kind == ErrorKind::user);
  CHECK(typo.error().message.find("did you mean 'kill-rank'") != std::string::npos);
  CHECK(parse_fault("kill-rank").error().message.find("name the rank") != std::string::npos);
  CHECK(parse_fault("hang-rank:x").error().message.find("'x' is not a rank") != std::string::npos);
  CHECK(parse_fault("kill-host").error().message.find("name the host") != std::string::npos);
  CHECK(parse_fault("slow-storage:1").error().message.find("takes no target") != std::string::npos);
}

TEST_CASE("event timestamps read back to the milliseconds they were written from") {
  int64_t wall = 1'795'000'123'456;
  CHECK(parse_timestamp_utc(format_timestamp_utc(wall)) == wall);
  CHECK_FALSE(parse_timestamp_utc("2026-11-29 23:40:01"));
  CHECK_FALSE(parse_timestamp_utc("2026-02-30T10:00:00.000Z"));  // no such day
  CHECK_FALSE(parse_timestamp_utc("2026-11-29T24:00:00.000Z"));
  CHECK_FALSE(parse_timestamp_utc("2026-11-2xT10:00:00.000Z"));
  CHECK_FALSE(parse_timestamp_utc("+026-11-29T10:00:00.000Z"));
  CHECK(parse_timestamp_utc("1970-01-01T00:00:00.001Z") == 1);
  CHECK(event_wall_ms(nlohmann::json{{"ts", format_timestamp_utc(wall)}}) == wall);
  CHECK_FALSE(event_wall_ms(nlohmann::json{{"ts", 5}}));
  CHECK_FALSE(event_wall_ms(nlohmann::json::array()));
}

TEST_CASE("drill.yaml: job path, overrides, faults in both spellings, objectives") {
  ScratchDir dir;
  write(dir.path + "/job.yaml", "version: 1\nworker: {command: [true]}\n");
  spec::DrillSpecResult loaded = spec::parse_drill_spec(
      "version: 1\n"
      "job: job.yaml\n"
      "set: {elastic.max_restarts: 3, heartbeat.hang_timeout: 3s}\n"
      "timeout: 5m\n"
      "faults:\n"
      "  - {fault: kill-rank, target: 1, at_step: 60}\n"
      "  - fault: hang-rank:0\n"
      "  - {fault: slow-storage, delay: 2s}\n"
      "objectives: {detect: 10s, recover: 1m, max_lost_steps: 100}\n",
      "drill.yaml", dir.path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  const spec::DrillSpec& drill = *loaded.spec;
  CHECK(drill.job_path == dir.path + "/job.yaml");
  REQUIRE(drill.sets.size() == 2);
  CHECK(drill.sets[0].key == "elastic.max_restarts");
  CHECK(drill.sets[0].value == "3");
  CHECK(drill.timeout == Millis(300'000));
  REQUIRE(drill.faults.size() == 3);
  CHECK(drill.faults[0].target == "1");
  CHECK(drill.faults[0].at_step == 60);
  CHECK(drill.faults[1].fault == "hang-rank");
  CHECK(drill.faults[1].target == "0");
  CHECK(drill.faults[2].delay == Millis(2000));
  CHECK(drill.objectives.recover == Millis(60'000));
  CHECK(drill.objectives.max_lost_steps == 100);
}

TEST_CASE("drill.yaml mistakes are reported with file:line:col and a fix") {
  spec::DrillSpecResult bad = spec::parse_drill_spec(
      "version: 1\n"
      "job: {version: 1, worker: {command: [true]}}\n"
      "faults:\n"
      "  - {fault: kill-rnak, target: 1}\n"
      "  - {fault: kill-rank, delay: 2s}\n"
      "objectives: {detect: 10, recovr: 1m}\n",
      "drill.yaml", ".");
  REQUIRE_FALSE(bad.ok());
  std::string message = bad.message();
  CHECK(message.find("drill.yaml:4:") != std::string::npos);
  CHECK(message.find("did you mean 'kill-rank'?") != std::string::npos);
  CHECK(message.find("only slow-storage takes a delay") != std::string::npos);
  CHECK(message.find("objectives.detect") != std::string::npos);
  CHECK(message.find("did you mean 'recover'?") != std::string::npos);

  spec::DrillSpecResult missing = spec::parse_drill_spec("version: 1\njob: nowhere.yaml\nfaults: []\n", "d.yaml", "/tmp");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("'nowhere.yaml' is not a file") != std::string::npos);
  CHECK(missing.message().find("faults") != std::string::npos);
}

TEST_CASE("the example configs/drill.yaml is a valid drill spec") {
  spec::DrillSpecResult example = spec::load_drill_spec(std::string(DTRAIN_SOURCE_DIR) + "/configs/drill.yaml");
  CHECK_MESSAGE(example.ok(), example.message());
}

TEST_CASE("--slo reads objectives at the top level or under objectives:") {
  ScratchDir dir;
  write(dir.path + "/slo.yaml", "detect: 5s\nmax_lost_steps: 20\n");
  Result<spec::DrillObjectives> flat = spec::load_drill_objectives(dir.path + "/slo.yaml");
  REQUIRE(flat);
  CHECK(flat->detect == Millis(5000));
  CHECK_FALSE(flat->recover);
  write(dir.path + "/nested.yaml", "version: 1\njob: x\nobjectives: {recover: 30s}\n");
  CHECK(spec::load_drill_objectives(dir.path + "/nested.yaml")->recover == Millis(30'000));
  write(dir.path + "/typo.yaml", "detetc: 5s\n");
  Result<spec::DrillObjectives> typo = spec::load_drill_objectives(dir.path + "/typo.yaml");
  REQUIRE_FALSE(typo);
  CHECK(typo.error().message.find("did you mean 'detect'?") != std::string::npos);
}

TEST_CASE("the drill history keeps one line per drill behind a version header") {
  ScratchDir dir;
  std::string path = dir.path + "/drills.jsonl";
  CHECK(read_drill_history(path)->empty());
  DrillReport report;
  report.drill_id = "drill-20261130-010000-abcd";
  report.mode = "live";
  report.run_id = "train-20261130-005900-1234";
  report.finished_wall_ms = 1'795'000'000'000;
  FaultVerdict verdict;
  verdict.injection.fault = *parse_fault("kill-rank:1");
  verdict.detect_ms = 31;
  verdict.recover_ms = 1840;
  verdict.steps_lost = 14;
  report.faults.push_back(verdict);
  REQUIRE(append_drill_history(path, report));
  report.faults[0].objectives.push_back({"recover", "1ms", "1.8s", false});
  REQUIRE(append_drill_history(path, report));

  CHECK(read_file(path)->rfind("{\"dtrain_drills\":1}\n", 0) == 0);
  Result<std::vector<nlohmann::json>> entries = read_drill_history(path);
  REQUIRE(entries);
  REQUIRE(entries->size() == 2);
  CHECK((*entries)[0]["verdict"] == "pass");
  CHECK((*entries)[1]["verdict"] == "fail");
  // Each verdict names the run's HTML report (dtrain drill writes it there).
  CHECK((*entries)[0]["report"].get<std::string>() == dtrain::runs_root() + "/train-20261130-005900-1234/report.html");
  std::string table = format_history(*entries);
  CHECK(table.find("kill-rank:1") != std::string::npos);
  CHECK(table.find("1.84s") != std::string::npos);
  CHECK(table.find("recover (limit 1ms from the drill spec, measured 1.8s)") != std::string::npos);

  write(dir.path + "/other.jsonl", "{\"dtrain_drills\":9}\n");
  CHECK(read_drill_history(dir.path + "/other.jsonl").error().message.find("upgrade dtrain") != std::string::npos);
}

TEST_CASE("corrupt-checkpoint damages one payload byte of the newest complete step, and needs two") {
  ScratchDir dir;
  std::string shard(200, 'a');
  write(dir.path + "/step-20/shard-tp0-pp0.bin", shard);
  write(dir.path + "/step-20/MANIFEST.json", "{}");
  Result<CorruptedCheckpoint> refused = corrupt_newest_checkpoint(dir.path);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("needs two") != std::string::npos);

  write(dir.path + "/step-40/shard-tp0-pp0.bin", shard);
  write(dir.path + "/step-40/MANIFEST.json", "{}");
  write(dir.path + "/step-60/shard-tp0-pp0.bin", shard);  // being written: no manifest yet
  CHECK(complete_checkpoint_steps(dir.path) == std::vector<int64_t>{40, 20});
  Result<CorruptedCheckpoint> corrupted = corrupt_newest_checkpoint(dir.path);
  REQUIRE(corrupted);
  CHECK(corrupted->step == 40);
  CHECK(corrupted->previous_step == 20);
  CHECK(corrupted->offset >= 56);
  std::string after = *read_file(dir.path + "/step-40/shard-tp0-pp0.bin");
  REQUIRE(after.size() == shard.size());
  int differing = 0;
  for (size_t i = 0; i < after.size(); ++i) differing += after[i] != shard[i];
  CHECK(differing == 1);
  CHECK(*read_file(dir.path + "/step-20/shard-tp0-pp0.bin") == shard);
}
