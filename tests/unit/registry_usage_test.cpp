// The run registry from fabricated run directories with known timestamps: `registry rebuild`'s
// rows and `usage`'s hours, computed by hand below (a run across a month boundary, a run that
// shrank mid-way, a CPU run whose supervisor died); the audit table refuses UPDATE and DELETE;
// a damaged file is an error naming it and the rebuild command.

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_rebuild.h"
#include "launcher/registry/registry_usage.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::registry;
using dtrain::testing::TempDir;

namespace {

/// Writes runs/<id>/events.jsonl (header + `lines`) and state.json.
void write_run(const std::string& runs, const std::string& id, const std::string& state_json,
               const std::vector<std::string>& lines) {
  std::filesystem::create_directories(runs + "/" + id);
  std::ofstream events(runs + "/" + id + "/events.jsonl");
  events << R"({"dtrain_events":1,"run_id":")" << id << R"(","created":"2026-10-01T00:00:00.000Z"})" << "\n";
  for (const std::string& line : lines) events << line << "\n";
  std::ofstream(runs + "/" + id + "/state.json") << state_json;
}

std::string started(const std::string& ts, int gen, const std::string& host, int rank) {
  return R"({"ts":")" + ts + R"(","ev":"worker.started","gen":)" + std::to_string(gen) + R"(,"host":")" + host +
         R"(","local_rank":0,"pid":)" + std::to_string(1000 + rank) + R"(,"rank":)" + std::to_string(rank) + "}";
}

std::string gpu_facts(const std::string& ts, const std::string& host, int gpus) {
  std::string list;
  for (int index = 0; index < gpus; ++index) list += (index ? "," : "") + std::string(R"({"index":)") + std::to_string(index) + "}";
  return R"({"ts":")" + ts + R"(","ev":"host.facts","host":")" + host + R"(","gpus":[)" + list + "]}";
}

/// Three runs, hand-computed:
///  month-cross (team-a, alice): gpu01, 4 GPUs, 2026-10-31 22:00 → 2026-11-01 04:00:
///    6 h × 4 = 24 GPU-h (October 2 h × 4 = 8, November 4 h × 4 = 16).
///  shrink (team-b, bob): gpu02 and gpu03, 2 GPUs each, from 2026-11-10 00:00; gpu03 lost at
///    03:00 (3 h × 2 = 6); generation 1 on gpu02 alone from 03:30 to the end at 06:30
///    (gpu02: 3.5 h × 2 + 3 h × 2 = 13). 19 GPU-h. One damaged line in its log.
///  cpu-died (team-a, alice): cpu01 without GPUs, 2 slots, 2026-11-20 00:00; the log ends at
///    01:30 without run.finished, the supervisor gone: 1.5 h × 2 = 3 slot-h.
std::string fabricate_runs(const TempDir& home) {
  std::string runs = home.path + "/runs";
  write_run(runs, "month-cross", R"({"version":1,"name":"mc","tenant":"team-a","user":"alice","state":"succeeded","exit_code":0})",
            {R"({"ts":"2026-10-31T21:59:00.000Z","ev":"run.submitted","name":"mc","hosts":["gpu01"],"world_size":4})",
             gpu_facts("2026-10-31T21:59:30.000Z", "gpu01", 4),
             R"({"ts":"2026-10-31T22:00:00.000Z","ev":"plan.generation","gen":0,"hosts":["gpu01"],"world_size":4})",
             R"({"ts":"2026-10-31T22:00:00.000Z","ev":"generation.spawned","gen":0})",
             started("2026-10-31T22:00:00.100Z", 0, "gpu01", 0), started("2026-10-31T22:00:00.100Z", 0, "gpu01", 1),
             started("2026-10-31T22:00:00.100Z", 0, "gpu01", 2), started("2026-10-31T22:00:00.100Z", 0, "gpu01", 3),
             R"({"ts":"2026-11-01T04:00:00.000Z","ev":"run.finished","state":"succeeded","exit_code":0})"});
  write_run(runs, "shrink", R"({"version":1,"name":"sh","tenant":"team-b","user":"bob","state":"succeeded","exit_code":0})",
            {R"({"ts":"2026-11-09T23:59:00.000Z","ev":"run.submitted","name":"sh","hosts":["gpu02","gpu03"],"world_size":4})",
             gpu_facts("2026-11-09T23:59:10.000Z", "gpu02", 8), gpu_facts("2026-11-09T23:59:10.000Z", "gpu03", 8),
             R"({"ts":"2026-11-10T00:00:00.000Z","ev":"plan.generation","gen":0,"hosts":["gpu02","gpu03"],"world_size":4})",
             started("2026-11-10T00:00:00.100Z", 0, "gpu02", 0), started("2026-11-10T00:00:00.100Z", 0, "gpu02", 1),
             started("2026-11-10T00:00:00.100Z", 0, "gpu03", 2), started("2026-11-10T00:00:00.100Z", 0, "gpu03", 3),
             "{\"ts\":\"2026-11-10T01:00:00.000Z\",\"ev\":\"garbage",  // damaged, skipped
             R"({"ts":"2026-11-10T03:00:00.000Z","ev":"host.lost","gen":0,"host":"gpu03","reason":"agent connection closed"})",
             R"({"ts":"2026-11-10T03:00:00.001Z","ev":"failure.detected","gen":0,"host":"gpu03","kind":"host.lost","detail":"gone"})",
             R"({"ts":"2026-11-10T03:30:00.000Z","ev":"plan.generation","gen":1,"hosts":["gpu02"],"world_size":2})",
             started("2026-11-10T03:30:00.100Z", 1, "gpu02", 0), started("2026-11-10T03:30:00.100Z", 1, "gpu02", 1),
             R"({"ts":"2026-11-10T03:31:00.001Z","ev":"recovery.completed","gen":1})",
             R"({"ts":"2026-11-10T06:30:00.000Z","ev":"run.finished","state":"succeeded","exit_code":0})"});
  write_run(runs, "cpu-died", R"({"version":1,"name":"cd","tenant":"team-a","user":"alice","state":"running"})",
            {R"({"ts":"2026-11-20T00:00:00.000Z","ev":"run.submitted","name":"cd","hosts":["cpu01"],"world_size":2})",
             R"({"ts":"2026-11-20T00:00:00.000Z","ev":"host.facts","host":"cpu01","gpus":[]})",
             R"({"ts":"2026-11-20T00:00:00.000Z","ev":"plan.generation","gen":0,"hosts":["cpu01"],"world_size":2})",
             started("2026-11-20T00:00:00.000Z", 0, "cpu01", 0), started("2026-11-20T00:00:00.000Z", 0, "cpu01", 1),
             R"({"ts":"2026-11-20T01:30:00.000Z","ev":"worker.exit","gen":0,"host":"cpu01","pid":1000,"rank":0})"});
  return runs;
}

std::map<std::string, UsageRow> usage_by(RegistryDb& db, UsageGrouping by, std::optional<int64_t> since = std::nullopt,
                                         std::optional<int64_t> until = std::nullopt) {
  UsageQuery query;
  query.by = by;
  query.since_ms = since;
  query.until_ms = until;
  query.now_ms = *parse_date_utc("2027-01-01");
  Result<std::vector<UsageRow>> rows = usage(db, query);
  REQUIRE_MESSAGE(rows.ok(), (rows.ok() ? "" : rows.error().message));
  std::map<std::string, UsageRow> by_group;
  for (const UsageRow& row : *rows) by_group[row.group] = row;
  return by_group;
}

int64_t count_rows(RegistryDb& db, const std::string& sql) {
  sqlite3_stmt* statement = nullptr;
  REQUIRE(sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(statement) == SQLITE_ROW);
  int64_t value = sqlite3_column_int64(statement, 0);
  sqlite3_finalize(statement);
  return value;
}

}  // namespace

TEST_CASE("rebuild and usage: hand-computed GPU-hours, month split, a shrink, a dead supervisor") {
  TempDir home;
  std::string runs = fabricate_runs(home);
  std::string file = home.path + "/registry.db";
  Result<RebuildSummary> rebuilt = rebuild_registry(file, runs);
  REQUIRE_MESSAGE(rebuilt.ok(), (rebuilt.ok() ? "" : rebuilt.error().message));
  CHECK(rebuilt->runs == 3);
  CHECK(rebuilt->allocations == 1 + 3 + 1);
  CHECK(rebuilt->skipped_lines == 1);
  struct stat info {};
  REQUIRE(::stat(file.c_str(), &info) == 0);
  CHECK((info.st_mode & 0077) == 0);  // private, like the run directories

  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  std::map<std::string, UsageRow> tenants = usage_by(*db, UsageGrouping::tenant);
  REQUIRE(tenants.size() == 2);
  CHECK(tenants["team-a"].gpu_hours == doctest::Approx(24.0).epsilon(1e-9));
  CHECK(tenants["team-a"].slot_hours == doctest::Approx(3.0).epsilon(1e-9));
  CHECK(tenants["team-a"].runs == 2);
  CHECK(tenants["team-b"].gpu_hours == doctest::Approx(19.0).epsilon(1e-9));
  CHECK(tenants["team-b"].slot_hours == 0.0);

  std::map<std::string, UsageRow> months = usage_by(*db, UsageGrouping::month);
  REQUIRE(months.size() == 2);
  CHECK(months["2026-10"].gpu_hours == doctest::Approx(8.0).epsilon(1e-9));
  CHECK(months["2026-11"].gpu_hours == doctest::Approx(16.0 + 19.0).epsilon(1e-9));
  CHECK(months["2026-11"].slot_hours == doctest::Approx(3.0).epsilon(1e-9));

  std::map<std::string, UsageRow> hosts = usage_by(*db, UsageGrouping::host);
  CHECK(hosts["gpu01"].gpu_hours == doctest::Approx(24.0).epsilon(1e-9));
  CHECK(hosts["gpu02"].gpu_hours == doctest::Approx(13.0).epsilon(1e-9));
  CHECK(hosts["gpu03"].gpu_hours == doctest::Approx(6.0).epsilon(1e-9));
  CHECK(hosts["cpu01"].slot_hours == doctest::Approx(3.0).epsilon(1e-9));

  std::map<std::string, UsageRow> users = usage_by(*db, UsageGrouping::user);
  CHECK(users["alice"].gpu_hours == doctest::Approx(24.0).epsilon(1e-9));
  CHECK(users["bob"].gpu_hours == doctest::Approx(19.0).epsilon(1e-9));

  // A period that starts inside the month-cross run counts only its part inside: 4 h × 4.
  std::map<std::string, UsageRow> november = usage_by(*db, UsageGrouping::tenant, parse_date_utc("2026-11"));
  CHECK(november["team-a"].gpu_hours == doctest::Approx(16.0).epsilon(1e-9));
  // And one that ends inside the shrink run: gpu02 and gpu03 from 00:00 to 02:00, 2 × 2 × 2 h.
  std::map<std::string, UsageRow> before_loss =
      usage_by(*db, UsageGrouping::tenant, parse_date_utc("2026-11-10"), *parse_date_utc("2026-11-10") + 2 * 3600 * 1000);
  CHECK(before_loss.count("team-a") == 0);
  CHECK(before_loss["team-b"].gpu_hours == doctest::Approx(8.0).epsilon(1e-9));

  // The rows behind those numbers.
  CHECK(count_rows(*db, "SELECT count(*) FROM allocations WHERE host = 'gpu03' AND end_reason LIKE 'host lost%'") == 1);
  CHECK(count_rows(*db, "SELECT count(*) FROM allocations WHERE run_id = 'cpu-died' AND end_reason LIKE 'log ends%'") == 1);
  CHECK(count_rows(*db, "SELECT count(*) FROM host_events WHERE host = 'gpu03' AND kind = 'lost'") == 1);
  CHECK(count_rows(*db, "SELECT recover_ms FROM failures WHERE run_id = 'shrink' AND root_cause = 1") == 31 * 60 * 1000);
  CHECK(count_rows(*db, "SELECT count(*) FROM runs WHERE state = 'succeeded' AND exit_code = 0") == 2);
  CHECK(count_rows(*db, "SELECT count(*) FROM runs WHERE id = 'cpu-died' AND state = 'supervisor gone'") == 1);
  CHECK(count_rows(*db, "PRAGMA user_version") == kRegistrySchemaVersion);
}

TEST_CASE("the schema: WAL, versioned, a newer version is refused") {
  TempDir home;
  std::string file = home.path + "/registry.db";
  {
    Result<RegistryDb> db = RegistryDb::open(file, true);
    REQUIRE(db.ok());
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db->handle(), "PRAGMA journal_mode", -1, &statement, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(statement) == SQLITE_ROW);
    CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0))) == "wal");
    sqlite3_finalize(statement);
    REQUIRE(db->execute("PRAGMA user_version = 99"));
  }
  Result<RegistryDb> newer = RegistryDb::open(file, false);
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.error().message.find("newer") != std::string::npos);
  CHECK(newer.error().message.find("dtrain registry rebuild") != std::string::npos);
}

TEST_CASE("the audit table is append-only: UPDATE and DELETE are refused, rebuild keeps it") {
  TempDir home;
  std::string file = home.path + "/registry.db";
  {
    Result<RegistryDb> db = RegistryDb::open(file, true);
    REQUIRE(db.ok());
    REQUIRE(db->append_audit({1000, "alice", "stop", "run-1", "", "--grace 10s", "ok"}));
    REQUIRE(db->append_audit({2000, "bob (sudo from alice)", "resume", "run-1", "", "", "ok"}));
    Status update = db->execute("UPDATE audit SET actor = 'mallory'");
    REQUIRE_FALSE(update.ok());
    CHECK(update.error().message.find("append-only") != std::string::npos);
    Status remove = db->execute("DELETE FROM audit WHERE actor = 'alice'");
    REQUIRE_FALSE(remove.ok());
    CHECK(remove.error().message.find("append-only") != std::string::npos);
    CHECK(count_rows(*db, "SELECT count(*) FROM audit WHERE actor IN ('alice', 'bob (sudo from alice)')") == 2);
  }
  // The audit is in no run directory: a rebuild carries it over from the registry it replaces.
  Result<RebuildSummary> rebuilt = rebuild_registry(file, home.path + "/runs");
  REQUIRE(rebuilt.ok());
  CHECK(rebuilt->audit_rows_kept == 2);
  Result<RegistryDb> db = RegistryDb::open(file, false);
  REQUIRE(db.ok());
  CHECK(count_rows(*db, "SELECT count(*) FROM audit") == 2);
}

TEST_CASE("a damaged registry: the error names the file and the rebuild, and rebuild repairs it") {
  TempDir home;
  std::string runs = fabricate_runs(home);
  std::string file = home.path + "/registry.db";
  std::ofstream(file) << std::string(8192, 'x');  // not an SQLite file at all
  Result<RegistryDb> damaged = RegistryDb::open(file, false);
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.error().message.find(file) != std::string::npos);
  CHECK(damaged.error().message.find("dtrain registry rebuild") != std::string::npos);

  Result<RebuildSummary> rebuilt = rebuild_registry(file, runs);
  REQUIRE_MESSAGE(rebuilt.ok(), (rebuilt.ok() ? "" : rebuilt.error().message));
  CHECK(rebuilt->runs == 3);
  CHECK(std::filesystem::exists(file + ".damaged"));  // its audit could not be read: kept
  Result<RegistryDb> repaired = RegistryDb::open(file, false);
  REQUIRE(repaired.ok());
  CHECK(usage_by(*repaired, UsageGrouping::tenant)["team-b"].gpu_hours == doctest::Approx(19.0).epsilon(1e-9));
}

TEST_CASE("a missing registry is an error that says how to build it") {
  TempDir home;
  Result<RegistryDb> missing = RegistryDb::open(home.path + "/registry.db", false);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("dtrain registry rebuild") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(home.path + "/registry.db"));
}

TEST_CASE("dates: YYYY-MM-DD and YYYY-MM in UTC, month boundaries") {
  CHECK(parse_date_utc("2026-11-01") == parse_date_utc("2026-11"));
  CHECK(*parse_date_utc("2026-11-01") == 1793491200000);
  CHECK_FALSE(parse_date_utc("2026-13-01").has_value());
  CHECK_FALSE(parse_date_utc("yesterday").has_value());
  CHECK_FALSE(parse_date_utc("2026-11-01x").has_value());
  CHECK_FALSE(parse_date_utc("2026-02-30").has_value());  // no such day, not the 2nd of March
  CHECK_FALSE(parse_date_utc("2026- 2-01").has_value());
  CHECK(next_month_start_ms(*parse_date_utc("2026-12-15")) == *parse_date_utc("2027-01-01"));
  CHECK(month_of(*parse_date_utc("2026-12-31") + 86399999) == "2026-12");
}
