// The registry's quarantine table (issue 29): a schema-1 file migrates to it with its rows kept;
// host.quarantined events become rows through the rebuild and the live write alike, once however
// often they are synced; the cross-run rule quarantines the root cause of K failures within the
// window across runs (not when they are spread wider, not again after a release), with the
// failures as evidence; release and expiry end a quarantine.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_quarantine.h"
#include "launcher/registry/registry_rebuild.h"
#include "launcher/registry/statement.h"
#include "launcher/runlog/run_snapshot.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::registry;
using dtrain::testing::TempDir;

namespace {

constexpr int64_t kHour = 3600 * 1000;

/// Writes runs/<id>/events.jsonl (header + `lines`) and a finished state.json.
void write_run(const std::string& runs, const std::string& id, const std::vector<std::string>& lines) {
  std::filesystem::create_directories(runs + "/" + id);
  std::ofstream events(runs + "/" + id + "/events.jsonl");
  events << R"({"dtrain_events":1,"run_id":")" << id << R"(","created":"2026-11-01T00:00:00.000Z"})" << "\n";
  for (const std::string& line : lines) events << line << "\n";
  std::ofstream(runs + "/" + id + "/state.json") << R"({"version":1,"name":")" << id
                                                 << R"(","state":"failed","exit_code":1})";
}

std::string submitted(const std::string& ts, const std::string& id) {
  return R"({"ts":")" + ts + R"(","ev":"run.submitted","run_id":")" + id + R"(","name":")" + id +
         R"(","hosts":["gpu01","gpu02"],"world_size":2})";
}

std::string plan(const std::string& ts) {
  return R"({"ts":")" + ts + R"(","ev":"plan.generation","gen":0,"hosts":["gpu01","gpu02"],"world_size":2})";
}

/// One failure on `host` in generation `gen` (the first of its generation: blamed on its host).
std::string failure(const std::string& ts, const std::string& host, int gen = 0) {
  return R"({"ts":")" + ts + R"(","ev":"failure.detected","gen":)" + std::to_string(gen) + R"(,"host":")" + host +
         R"(","kind":"worker.exit","rank":1,"detail":"exit code 3"})";
}

std::string finished(const std::string& ts) {
  return R"({"ts":")" + ts + R"(","ev":"run.finished","state":"failed","exit_code":1,"restarts":0,"generations":1,"duration_ms":1})";
}

/// A run of one failure blamed on `host` at `ts` (2026-11-10T<hh>:...).
void failed_run(const std::string& runs, const std::string& id, const std::string& day_hour, const std::string& host) {
  write_run(runs, id,
            {submitted(day_hour + ":00:00.000Z", id), plan(day_hour + ":00:01.000Z"),
             failure(day_hour + ":10:00.000Z", host), finished(day_hour + ":10:05.000Z")});
}

int64_t count_rows(RegistryDb& db, const std::string& sql) {
  Statement query(db.handle(), sql);
  REQUIRE(query.ok());
  REQUIRE(query.step() == SQLITE_ROW);
  return query.column_int64(0);
}

QuarantineRule rule_of_three() { return QuarantineRule{3, 24 * kHour, 7 * 24 * kHour}; }

}  // namespace

TEST_CASE("a schema-1 registry is migrated: the quarantine table is added and its rows are kept") {
  TempDir home;
  std::string file = home.path + "/registry.db";
  {
    // A file as schema 1 made it: every table but quarantine, user_version 1, with rows.
    Result<RegistryDb> db = RegistryDb::open(file, true);
    REQUIRE(db.ok());
    REQUIRE(db->execute("DROP TABLE quarantine"));
    REQUIRE(db->execute("DROP INDEX failures_by_run"));
    REQUIRE(db->execute("PRAGMA user_version = 1"));
    REQUIRE(db->insert_run({"old-run", "", "alice", "old", "", "", 1000, std::nullopt, std::nullopt, "succeeded", 0, ""}));
    REQUIRE(db->append_audit({1000, "alice", "submit", "old-run", "", "", "started"}));
  }
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  CHECK(count_rows(*db, "PRAGMA user_version") == 2);
  CHECK(count_rows(*db, "SELECT count(*) FROM runs WHERE id = 'old-run'") == 1);
  CHECK(count_rows(*db, "SELECT count(*) FROM audit") == 1);
  CHECK(count_rows(*db, "SELECT count(*) FROM quarantine") == 0);
  CHECK(count_rows(*db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'failures_by_run'") == 1);
  QuarantineRow manual;
  manual.host = "gpu02";
  manual.reason = "by hand";
  manual.since_ms = 1000;
  manual.until_ms = 2000;
  manual.source = kManualQuarantine;
  REQUIRE(insert_quarantine(*db, manual));
  CHECK(count_rows(*db, "SELECT count(*) FROM quarantine") == 1);
}

TEST_CASE("host.quarantined becomes a row once, through the rebuild and the live write, and a release stays") {
  TempDir home;
  std::string runs = home.path + "/runs";
  std::string file = home.path + "/registry.db";
  std::vector<std::string> lines = {
      submitted("2026-11-10T08:00:00.000Z", "health-run"), plan("2026-11-10T08:00:01.000Z"),
      R"json({"ts":"2026-11-10T08:00:02.000Z","ev":"host.quarantined","host":"gpu02","reason":"failed its health check (start)","evidence":["network ports: mlx5_0 port 1 is 1: DOWN"],"duration_ms":604800000})json",
      finished("2026-11-10T08:00:05.000Z")};
  write_run(runs, "health-run", lines);
  REQUIRE(rebuild_registry(file, runs).ok());
  REQUIRE(rebuild_registry(file, runs).ok());
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  Result<std::vector<QuarantineRow>> rows = quarantine_rows(*db);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 1);
  const QuarantineRow row = rows->front();  // a copy: rows is assigned again below
  CHECK(row.host == "gpu02");
  CHECK(row.source == "health-run");
  CHECK(row.reason == "failed its health check (start)");
  CHECK(row.evidence == nlohmann::json::array({"network ports: mlx5_0 port 1 is 1: DOWN"}));
  CHECK(quarantine_time_text(row.since_ms) == "2026-11-10T08:00:02Z");
  CHECK(row.until_ms - row.since_ms == 7 * 24 * kHour);

  // Active within its week, not after; a release ends it at once, and a re-sync (the supervisor's
  // live write, each a complete picture) or a rebuild does not bring it back.
  CHECK(active_quarantines(*db, row.since_ms + kHour)->size() == 1);
  CHECK(active_quarantines(*db, row.until_ms)->empty());
  Result<int> released = release_quarantine(*db, "gpu02", row.since_ms + kHour, "alice", "NIC replaced");
  REQUIRE(released.ok());
  CHECK(*released == 1);
  CHECK(active_quarantines(*db, row.since_ms + 2 * kHour)->empty());
  CHECK(*release_quarantine(*db, "gpu02", row.since_ms + 2 * kHour, "alice", "again") == 0);

  std::vector<LoggedEvent> events;
  for (const std::string& line : lines) events.push_back(*parse_logged_event(line));
  RunRecords records = records_from_events("health-run", runs + "/health-run", events, RunSnapshot{}, false);
  REQUIRE(records.quarantines.size() == 1);
  REQUIRE(replace_run_records(*db, records).ok());
  REQUIRE(replace_run_records(*db, records).ok());
  REQUIRE(rebuild_registry(file, runs).ok());
  rows = quarantine_rows(*db);
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().released_by == "alice");
  CHECK(rows->front().release_reason == "NIC replaced");
  CHECK(active_quarantines(*db, row.since_ms + 2 * kHour)->empty());
}

TEST_CASE("cross-run rule: the root cause of K failures within the window across runs is quarantined, once") {
  TempDir home;
  std::string runs = home.path + "/runs";
  std::string file = home.path + "/registry.db";
  // gpu02 fails three runs within three hours; gpu01 fails once (no quarantine).
  failed_run(runs, "r1", "2026-11-10T01", "gpu02");
  failed_run(runs, "r2", "2026-11-10T02", "gpu01");
  failed_run(runs, "r3", "2026-11-10T03", "gpu02");
  failed_run(runs, "r4", "2026-11-10T04", "gpu02");
  auto rule = [](const std::string&) { return rule_of_three(); };
  REQUIRE(rebuild_registry(file, runs, {}, rule).ok());
  REQUIRE(rebuild_registry(file, runs, {}, rule).ok());  // idempotent
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  Result<std::vector<QuarantineRow>> rows = quarantine_rows(*db);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 1);
  const QuarantineRow row = rows->front();  // a copy: rows is assigned again below
  CHECK(row.host == "gpu02");
  CHECK(row.source == "r4");  // the run whose failure made three
  CHECK(quarantine_time_text(row.since_ms) == "2026-11-10T04:10:00Z");
  CHECK(row.until_ms - row.since_ms == 7 * 24 * kHour);
  CHECK(row.reason.find("root cause of 3 failures in 3 runs") != std::string::npos);
  REQUIRE(row.evidence.size() == 3);
  CHECK(row.evidence[0]["run_id"] == "r1");
  CHECK(row.evidence[0]["at"] == "2026-11-10T01:10:00Z");
  CHECK(row.evidence[0]["cause"] == "worker.exit (rank 1)");
  CHECK(row.evidence[2]["run_id"] == "r4");

  // The live write of r4 again (a re-sync): nothing new.
  Result<std::vector<QuarantineRow>> again = apply_cross_run_rule(*db, "r4", rule_of_three());
  REQUIRE(again.ok());
  CHECK(again->empty());

  // Released; one more failure of gpu02 does not count the forgiven ones: no new quarantine.
  REQUIRE(*release_quarantine(*db, "gpu02", row.since_ms + kHour, "bob", "reseated the GPU") == 1);
  failed_run(runs, "r5", "2026-11-10T06", "gpu02");
  REQUIRE(rebuild_registry(file, runs, {}, rule).ok());
  rows = quarantine_rows(*db);
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().released_ms.has_value());
}

TEST_CASE("cross-run rule: failures spread wider than the window, or a rule of 0, quarantine nothing") {
  TempDir home;
  std::string runs = home.path + "/runs";
  std::string file = home.path + "/registry.db";
  failed_run(runs, "s1", "2026-11-10T01", "gpu02");
  failed_run(runs, "s2", "2026-11-11T02", "gpu02");  // 25 h later
  failed_run(runs, "s3", "2026-11-12T03", "gpu02");
  REQUIRE(rebuild_registry(file, runs, {}, [](const std::string&) { return rule_of_three(); }).ok());
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  CHECK(quarantine_rows(*db)->empty());
  // A window of three days holds all three; after 0 turns the rule off.
  QuarantineRule wide = rule_of_three();
  wide.window_ms = 72 * kHour;
  QuarantineRule off = wide;
  off.after = 0;
  CHECK(apply_cross_run_rule(*db, "s3", off)->empty());
  Result<std::vector<QuarantineRow>> added = apply_cross_run_rule(*db, "s3", wide);
  REQUIRE(added.ok());
  REQUIRE(added->size() == 1);
  CHECK(added->front().evidence.size() == 3);
}

TEST_CASE("a run that quarantined a host itself gets no second row from the cross-run rule") {
  TempDir home;
  std::string runs = home.path + "/runs";
  std::string file = home.path + "/registry.db";
  failed_run(runs, "t1", "2026-11-10T01", "gpu02");
  failed_run(runs, "t2", "2026-11-10T02", "gpu02");
  write_run(runs, "t3",
            {submitted("2026-11-10T03:00:00.000Z", "t3"), plan("2026-11-10T03:00:01.000Z"),
             failure("2026-11-10T03:10:00.000Z", "gpu02"),
             R"({"ts":"2026-11-10T03:10:01.000Z","ev":"host.quarantined","host":"gpu02","reason":"root cause of 3 failures","evidence":["x"],"duration_ms":3600000})",
             finished("2026-11-10T03:10:05.000Z")});
  REQUIRE(rebuild_registry(file, runs, {}, [](const std::string&) { return rule_of_three(); }).ok());
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  Result<std::vector<QuarantineRow>> rows = quarantine_rows(*db);
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().reason == "root cause of 3 failures");
}

TEST_CASE("cross-run rule: each incident counts once, for the host it is blamed on, not for what followed it") {
  TempDir home;
  std::string runs = home.path + "/runs";
  std::string file = home.path + "/registry.db";
  // m1: two incidents blamed on gpu02 (generations 0 and 1); in generation 0 gpu01 failed after
  // it (a consequence, not counted). m2: a third on gpu02. No failure.root_cause anywhere: with
  // more than one failure in a run, no row is marked root cause, and the first of each
  // generation is what the rule counts.
  write_run(runs, "m1",
            {submitted("2026-11-10T01:00:00.000Z", "m1"), plan("2026-11-10T01:00:01.000Z"),
             failure("2026-11-10T01:10:00.000Z", "gpu02", 0), failure("2026-11-10T01:10:30.000Z", "gpu01", 0),
             R"({"ts":"2026-11-10T01:11:00.000Z","ev":"plan.generation","gen":1,"hosts":["gpu01","gpu02"],"world_size":2})",
             failure("2026-11-10T01:20:00.000Z", "gpu02", 1), finished("2026-11-10T01:20:05.000Z")});
  failed_run(runs, "m2", "2026-11-10T02", "gpu02");
  REQUIRE(rebuild_registry(file, runs, {}, [](const std::string&) { return rule_of_three(); }).ok());
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  Result<std::vector<QuarantineRow>> rows = quarantine_rows(*db);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().host == "gpu02");
  CHECK(rows->front().source == "m2");
  CHECK(rows->front().reason.find("root cause of 3 failures in 2 runs") != std::string::npos);
  // gpu01's one failure followed gpu02's in the same generation: even a rule of 1 does not blame it.
  QuarantineRule one = rule_of_three();
  one.after = 1;
  Result<std::vector<QuarantineRow>> added = apply_cross_run_rule(*db, "m1", one);
  REQUIRE(added.ok());
  for (const QuarantineRow& row : *added) CHECK(row.host != "gpu01");
}
