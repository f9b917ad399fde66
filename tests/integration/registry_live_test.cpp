// The run registry as runs write it: real `dtrain submit`/`run`/`stop` processes on this machine
// (the embedded localhost default), the registry read back with SQLite. The rows appear while the
// run runs and equal what `dtrain registry rebuild` makes from the run directory; secrets never
// reach the file; a locked or damaged registry never holds a run up; and two submits, a stop and
// a usage report at the same moment each leave exactly one audit row.

#include <doctest/doctest.h>

#include <sqlite3.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/identity.h"
#include "launcher/base/strings.h"
#include "launcher/runlog/run_state.h"
#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain;
using namespace dtrain::testing;

namespace {

/// Every row of `sql`'s result, each as its columns joined by '|' (NULL as "NULL"); a query that
/// fails (no file yet, locked past a second) gives one row starting "error: ".
std::vector<std::string> query_rows(const std::string& db_path, const std::string& sql) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    rows.push_back(std::string("error: ") + sqlite3_errmsg(db));
    sqlite3_close_v2(db);
    return rows;
  }
  sqlite3_busy_timeout(db, 1000);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
    rows.push_back(std::string("error: ") + sqlite3_errmsg(db));
  } else {
    int stepped = 0;
    while ((stepped = sqlite3_step(statement)) == SQLITE_ROW) {
      std::string row;
      for (int column = 0; column < sqlite3_column_count(statement); ++column) {
        if (column > 0) row += "|";
        const unsigned char* text = sqlite3_column_text(statement, column);
        row += text ? reinterpret_cast<const char*>(text) : "NULL";
      }
      rows.push_back(row);
    }
    if (stepped != SQLITE_DONE) rows.push_back(std::string("error: ") + sqlite3_errmsg(db));
  }
  sqlite3_finalize(statement);
  sqlite3_close_v2(db);
  return rows;
}

/// The run's rows in every table but audit, in a fixed order: what a rebuild must reproduce.
std::vector<std::string> run_rows(const std::string& db_path, const std::string& run_id) {
  std::vector<std::string> rows;
  for (const std::string& sql :
       {"SELECT id, tenant, user, name, spec_hash, run_dir, submitted_ms, started_ms, ended_ms, state, exit_code,"
        " exit_reason FROM runs WHERE id = '" + run_id + "'",
        "SELECT * FROM allocations WHERE run_id = '" + run_id + "' ORDER BY generation, host",
        "SELECT * FROM failures WHERE run_id = '" + run_id + "' ORDER BY detected_ms, host",
        "SELECT * FROM host_events WHERE run_id = '" + run_id + "' ORDER BY at_ms, host"}) {
    for (std::string& row : query_rows(db_path, sql)) rows.push_back(std::move(row));
  }
  return rows;
}

/// The bytes of the registry and its WAL, for a search for secrets.
std::string registry_bytes(const std::string& db_path) {
  return read_text(db_path) + read_text(db_path + "-wal");
}

/// True when `wall_ms` lies in the first 3 hours of a UTC month: the quota test's past usage
/// would straddle the month boundary, and only part of it would count.
bool registry_month_start_is_near(int64_t wall_ms) {
  time_t seconds = static_cast<time_t>(wall_ms / 1000);
  tm utc{};
  gmtime_r(&seconds, &utc);
  return utc.tm_mday == 1 && utc.tm_hour < 3;
}

std::string job_spec(const std::string& name, const std::string& tenant, const std::string& command_text) {
  return "version: 1\nname: " + name + "\ntenant: " + tenant +
         "\nslots_per_host: 2\nworker:\n  command: [/bin/sh, -c, '" + command_text +
         "']\n  env:\n    HF_TOKEN: hf-live-secret-0123456789\n    WANDB_API_KEY: wandb-secret-abcdef\n"
         "stop_grace: 2s\n";
}

}  // namespace

TEST_CASE("a run's registry rows appear while it runs, match a rebuild, and hold no secret") {
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";
  std::string spec = env.write_spec("job.yaml", job_spec("live", "vision", "sleep 3"));
  DtrainProcess submit = env.start({"submit", spec, "--set", "worker.env.EXTRA_PASSWORD=pw-cli-secret-42"});

  std::string run_dir = only_run_dir(env);
  std::string run_id = run_id_of(run_dir);
  // Written as it happens: the run is in the registry, still running, holding localhost's slots
  // (held until the supervisor's last write, which it renews while the run runs).
  bool running_row = wait_until([&] {
    std::vector<std::string> rows = query_rows(registry, "SELECT state, ended_ms FROM runs WHERE id = '" + run_id + "'");
    std::vector<std::string> held = query_rows(
        registry, "SELECT units FROM allocations WHERE end_reason LIKE 'still held%' AND run_id = '" + run_id + "'");
    return rows.size() == 1 && rows[0].find("|NULL") != std::string::npos && held == std::vector<std::string>{"2"};
  }, 30000);
  CHECK_MESSAGE(running_row, "no open run row while the run ran: " << run_rows(registry, run_id).size() << " rows");

  REQUIRE(submit.wait(60000));
  INFO(submit.err());
  REQUIRE(submit.exit_code == 0);
  std::vector<std::string> live = run_rows(registry, run_id);
  REQUIRE(live.size() == 2);  // the run and its one allocation; no failures, no host events
  CHECK(live[0].rfind(run_id + "|vision|" + run_owner() + "|live|", 0) == 0);
  CHECK(live[0].find("|succeeded|0|") != std::string::npos);
  CHECK(live[1].find("|localhost|2|slot|") != std::string::npos);
  CHECK(live[1].find("|NULL|") == std::string::npos);  // the allocation ended with the run

  // The audit row: who started it, with the --set value and worker.env values redacted.
  std::vector<std::string> audit = query_rows(registry, "SELECT actor, action, run_id, arguments, result FROM audit");
  REQUIRE(audit.size() == 1);
  CHECK(audit[0].rfind(audit_actor() + "|submit|" + run_id + "|", 0) == 0);
  CHECK(audit[0].find("worker.env.EXTRA_PASSWORD=<redacted>") != std::string::npos);
  CHECK(audit[0].find("|started") != std::string::npos);
  for (const char* secret : {"hf-live-secret", "wandb-secret", "pw-cli-secret"}) {
    CHECK_MESSAGE(registry_bytes(registry).find(secret) == std::string::npos, secret << " reached registry.db");
  }

  // The run directory is the source of truth: a rebuild gives the very same rows, keeps the audit.
  DtrainProcess rebuilt = env.run({"registry", "rebuild"});
  INFO(rebuilt.err());
  REQUIRE(rebuilt.exit_code == 0);
  CHECK(run_rows(registry, run_id) == live);
  CHECK(query_rows(registry, "SELECT count(*) FROM audit WHERE action = 'submit'") == std::vector<std::string>{"1"});
  CHECK(query_rows(registry, "SELECT count(*) FROM audit WHERE action = 'registry rebuild'") ==
        std::vector<std::string>{"1"});
  check_nothing_left(run_id);
}

TEST_CASE("a locked registry and a damaged one never hold a run up, and say what to do") {
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";
  std::string spec = env.write_spec("job.yaml", job_spec("locked", "vision", "exit 0"));
  REQUIRE(env.run({"registry", "rebuild"}).exit_code == 0);  // an empty registry to lock

  SUBCASE("locked by another writer for the whole run") {
    sqlite3* holder = nullptr;
    REQUIRE(sqlite3_open_v2(registry.c_str(), &holder, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK);
    DtrainProcess submit = env.run({"submit", spec}, 120000);
    sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close_v2(holder);
    INFO(submit.err());
    CHECK(submit.exit_code == 0);
    CHECK(submit.err().find("warning: the audit table was not updated") != std::string::npos);
    std::string run_dir = env.run_dirs().at(0);
    CHECK(read_text(run_dir + "/supervisor.log").find("run registry not updated") != std::string::npos);
    // Nothing is lost: the run directory has it all, and a rebuild brings the registry up to date.
    REQUIRE(env.run({"registry", "rebuild"}).exit_code == 0);
    CHECK(query_rows(registry, "SELECT state FROM runs") == std::vector<std::string>{"succeeded"});
  }
  SUBCASE("damaged: not a database any more") {
    write_text(registry, std::string(8192, 'x'));
    ::unlink((registry + "-wal").c_str());
    ::unlink((registry + "-shm").c_str());
    DtrainProcess submit = env.run({"submit", spec}, 120000);
    INFO(submit.err());
    CHECK(submit.exit_code == 0);
    CHECK(submit.err().find(registry) != std::string::npos);
    CHECK(submit.err().find("dtrain registry rebuild") != std::string::npos);
    DtrainProcess usage = env.run({"usage"});
    CHECK(usage.exit_code != 0);
    CHECK(usage.err().find(registry) != std::string::npos);
    CHECK(usage.err().find("dtrain registry rebuild") != std::string::npos);
    DtrainProcess rebuilt = env.run({"registry", "rebuild"});
    INFO(rebuilt.err());
    REQUIRE(rebuilt.exit_code == 0);
    CHECK(std::filesystem::exists(registry + ".damaged"));
    CHECK(query_rows(registry, "SELECT state FROM runs") == std::vector<std::string>{"succeeded"});
  }
  for (const std::string& run_dir : env.run_dirs()) check_nothing_left(run_id_of(run_dir));
}

TEST_CASE("two submits, a stop and a usage report at the same moment: each action audited once") {
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";
  std::string long_spec = env.write_spec("long.yaml", job_spec("long", "vision", "sleep 60"));
  std::string short_spec = env.write_spec("short.yaml", job_spec("short", "nlp", "sleep 1"));
  DtrainProcess started = env.run({"submit", "--detach", long_spec});
  REQUIRE(started.exit_code == 0);
  std::string long_id = started.out().substr(0, started.out().find('\n'));
  // Whatever fails below, the detached run (a 60 s sleep) does not outlive the test.
  struct StopOnExit {
    DtrainEnv& env;
    std::string id;
    ~StopOnExit() { env.run({"stop", id, "--timeout", "30s"}, 60000); }
  } stop_on_exit{env, long_id};
  REQUIRE(wait_until([&] {
    std::vector<std::string> held = query_rows(
        registry, "SELECT count(*) FROM allocations WHERE end_reason LIKE 'still held%' AND run_id = '" + long_id + "'");
    return held == std::vector<std::string>{"1"};
  }, 30000));

  // All at once.
  DtrainProcess first = env.start({"submit", short_spec});
  DtrainProcess second = env.start({"submit", short_spec});
  DtrainProcess stop = env.start({"stop", long_id});
  DtrainProcess usage = env.start({"usage", "--by", "tenant", "--json"});
  for (DtrainProcess* process : {&first, &second, &stop, &usage}) {
    CHECK(process->wait(120000));
    INFO(process->err());
    CHECK(process->exit_code == 0);
  }
  CHECK(nlohmann::json::parse(usage.out(), nullptr, false).is_object());

  std::vector<std::string> runs = query_rows(registry, "SELECT name, state FROM runs ORDER BY name, id");
  CHECK(runs == std::vector<std::string>{"long|stopped", "short|succeeded", "short|succeeded"});
  std::vector<std::string> actions = query_rows(registry, "SELECT action, count(*) FROM audit GROUP BY action ORDER BY action");
  CHECK(actions == std::vector<std::string>{"stop|1", "submit|3"});  // before StopOnExit's own stop
  CHECK(query_rows(registry, "SELECT count(DISTINCT run_id) FROM audit WHERE action = 'submit'") ==
        std::vector<std::string>{"3"});
  CHECK(query_rows(registry, "SELECT run_id FROM audit WHERE action = 'stop'") == std::vector<std::string>{long_id});
  CHECK(query_rows(registry, "SELECT count(*) FROM allocations WHERE end_ms IS NULL OR end_reason LIKE 'still held%'") ==
        std::vector<std::string>{"0"});
  for (const std::string& run_dir : env.run_dirs()) check_nothing_left(run_id_of(run_dir));
}

TEST_CASE("a tenant over its monthly budget is refused with the numbers, and --over-quota is audited") {
  // Before anything is made: a skip exits at once.
  int64_t wall_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  if (registry_month_start_is_near(wall_now)) {
    dtrain::testing::skip_test("the UTC month began less than 3 hours ago: this test's 2.4 hours of past use would "
                               "straddle its start");
  }
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";
  std::filesystem::create_directories(env.home());
  // vision may use 2 slot-hours a month; it has used 1.8 this month (90 %: near), then 2.4 (over).
  write_text(env.home() + "/config.yaml", "quotas:\n  warn_at: 0.8\n  tenants:\n    vision: {slot_hours: 2}\n");
  REQUIRE(env.run({"registry", "rebuild"}).exit_code == 0);
  int64_t hour = 3600 * 1000;
  int64_t start = wall_now - 2 * hour;  // a run of today (2 hours ago is this month unless it is the 1st, 01:59)
  auto add_usage = [&](const std::string& id, int64_t millis) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(registry.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    std::string sql = "INSERT INTO runs (id, tenant, user, name, submitted_ms, state) VALUES ('" + id +
                      "', 'vision', 'alice', 'past', " + std::to_string(start) + ", 'succeeded');"
                      "INSERT INTO allocations (run_id, generation, host, units, resource, start_ms, end_ms) VALUES ('" +
                      id + "', 0, 'cpu01', 1, 'slot', " + std::to_string(start) + ", " + std::to_string(start + millis) + ");";
    CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close_v2(db);
  };
  add_usage("past-1", hour * 18 / 10);
  std::string spec = env.write_spec("job.yaml", job_spec("quota", "vision", "exit 0"));

  DtrainProcess near = env.run({"submit", spec});
  INFO(near.err());
  CHECK(near.exit_code == 0);
  CHECK(near.err().find("warning: tenant vision has used 1.8 of 2") != std::string::npos);

  add_usage("past-2", hour * 6 / 10);
  DtrainProcess refused = env.run({"submit", spec});
  INFO(refused.err());
  CHECK(refused.exit_code == 2);
  CHECK(refused.err().find("refused: tenant vision has used 2.4") != std::string::npos);
  CHECK(refused.err().find("--over-quota") != std::string::npos);
  CHECK(env.run_dirs().size() == 1);  // the refused submit made no run

  DtrainProcess overridden = env.run({"submit", "--over-quota", spec});
  INFO(overridden.err());
  CHECK(overridden.exit_code == 0);
  std::vector<std::string> audit = query_rows(registry, "SELECT action, run_id = '', result FROM audit WHERE action = 'submit' ORDER BY at_ms");
  REQUIRE(audit.size() == 3);
  CHECK(audit[0].rfind("submit|0|started; near quota: tenant vision has used 1.8", 0) == 0);
  CHECK(audit[1].rfind("submit|1|refused: over quota: tenant vision has used 2.4", 0) == 0);
  CHECK(audit[2].rfind("submit|0|started; over quota, overridden with --over-quota", 0) == 0);
  for (const std::string& run_dir : env.run_dirs()) check_nothing_left(run_id_of(run_dir));
}

TEST_CASE("a supervisor killed with SIGKILL leaves its run's hours ending at its last write, not growing") {
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";
  std::string spec = env.write_spec(
      "job.yaml", "version: 1\nname: ghost\ntenant: vision\nslots_per_host: 2\nworker:\n  command: [/bin/sh, -c, "
                  "'sleep 120']\nheartbeat:\n  interval: 500ms\n  timeout: 3s\nstop_grace: 1s\n");
  DtrainProcess started = env.run({"submit", "--detach", spec});
  REQUIRE(started.exit_code == 0);
  std::string run_id = started.out().substr(0, started.out().find('\n'));
  std::string run_dir = env.home() + "/runs/" + run_id;
  REQUIRE(wait_until([&] {
    // A write after the first: the allocation has held for some time. Killed right after the
    // first write, the run has no hours to keep (start = last write) and usage lists no row
    // (seen in full suites, 7 times in 12 alone).
    return query_rows(registry, "SELECT count(*) FROM allocations WHERE end_reason LIKE 'still held%' AND end_ms > start_ms") ==
           std::vector<std::string>{"1"};
  }, 30000));
  // state.json is rewritten on its own pace: a read can come before the one that names the
  // supervisor (seen once in a full suite: "supervisor": null).
  int supervisor = 0;
  REQUIRE(wait_until([&] {
    Result<RunSnapshot> state = read_state_file(run_dir + "/state.json");
    if (!state || !state->supervisor) return false;
    supervisor = state->supervisor->pid;
    return true;
  }, 30000));
  REQUIRE(supervisor > 0);
  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  // Its agent fences the workers once the supervisor has been silent for heartbeat.timeout.
  CHECK(wait_until([&] { return processes_of_run(run_id).empty(); }, 60000));

  // The registry still says "running" (only a rebuild can tell the supervisor is gone), but the
  // run's slot-hours stop at the supervisor's last write: they do not grow with every report.
  DtrainProcess first = env.run({"usage", "--json"});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  DtrainProcess second = env.run({"usage", "--json"});
  REQUIRE(first.exit_code == 0);
  REQUIRE(second.exit_code == 0);
  INFO("first usage: " << first.out() << "\nallocations: "
                       << join(query_rows(registry, "SELECT * FROM allocations"), "\n"));
  double before = nlohmann::json::parse(first.out())["rows"][0]["slot_hours"].get<double>();
  double after = nlohmann::json::parse(second.out())["rows"][0]["slot_hours"].get<double>();
  CHECK(before > 0);
  CHECK(after == before);
  DtrainProcess rebuilt = env.run({"registry", "rebuild"});
  REQUIRE(rebuilt.exit_code == 0);
  CHECK(query_rows(registry, "SELECT state FROM runs") == std::vector<std::string>{"supervisor gone"});
}
