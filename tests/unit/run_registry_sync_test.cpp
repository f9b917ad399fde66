// RegistrySync, the supervisor's live registry writer: it reads what events.jsonl held when it
// started (a resumed run's history, the submit) once, and from then on takes the events the run
// recorder hands it (observe), not the file: a line appended to the file afterwards by anyone
// else is not read, and events never written to the file still make the rows.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/base/clock.h"
#include "launcher/events/events.h"
#include "launcher/registry/registry_db.h"
#include "launcher/run/registry_sync.h"
#include "launcher/runlog/event_log.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using dtrain::testing::TempDir;

namespace {

constexpr int64_t kStart = 1'795'000'000'000;

LoggedEvent typed(const nlohmann::json& event) {
  Result<LoggedEvent> logged = to_logged_event(event);
  REQUIRE_MESSAGE(logged.ok(), logged.error().message);
  return std::move(*logged);
}

int64_t count_rows(const std::string& registry_file, const std::string& sql) {
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry_file, false);
  REQUIRE_MESSAGE(db.ok(), db.error().message);
  sqlite3_stmt* statement = nullptr;
  REQUIRE(sqlite3_prepare_v2(db->handle(), sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(statement) == SQLITE_ROW);
  int64_t value = sqlite3_column_int64(statement, 0);
  sqlite3_finalize(statement);
  return value;
}

}  // namespace

TEST_CASE("the live registry writer takes its events from the recorder, and from the file only what it held before") {
  TempDir home;
  std::string run_dir = home.path + "/runs/r1";
  std::filesystem::create_directories(run_dir);
  std::string events_path = run_dir + "/events.jsonl";
  std::string registry_file = home.path + "/registry.db";
  {
    Result<EventLog> log = EventLog::create(events_path, "r1", kStart);
    REQUIRE(log.ok());
    events::RunSubmitted submitted;
    submitted.run_id = "r1";
    submitted.run_name = "demo";
    submitted.user = "alice";
    submitted.hosts = {"h1", "h2"};
    submitted.world_size = 2;
    REQUIRE(log->append(submitted.to_json(), kStart).ok());
  }
  std::vector<std::string> warnings;
  {
    run::RegistrySync sync(registry_file, "r1", run_dir, events_path, run_dir + "/spec.yaml", nullptr,
                           [&](const std::string& warning) { warnings.push_back(warning); });
    // After the sync started: a line in the file that no one observed must not count.
    REQUIRE(EventLog::append_to(events_path, events::HostLost{"h2", "silent", true, 5000}.to_json(), kStart + 50).ok());

    // What the recorder hands it (never written to the file here).
    nlohmann::json plan = events::PlanGeneration{0, 2, 2, 1, 1, 1, -1, {"h1", "h2"}}.to_json();
    sync.observe(typed(plan), kStart + 100);
    for (int rank = 0; rank < 2; ++rank) {
      nlohmann::json started = events::WorkerStarted{rank, rank == 0 ? "h1" : "h2", 0, 100 + rank}.to_json();
      started["gen"] = 0;  // the supervisor's stamp
      sync.observe(typed(started), kStart + 200);
    }
    events::FailureCause cause{events::FailureKind::worker_exit, "h1", "exit code 3"};
    cause.rank = 0;
    sync.observe(typed(events::FailureDetected{cause, 20, std::nullopt}.to_json()), kStart + 300);
    sync.observe(typed(events::RunFinished{"failed", 1, 0, 1, 400}.to_json()), kStart + 400);
    sync.wait_if_finished();
  }
  CHECK(warnings.empty());
  CHECK(count_rows(registry_file, "SELECT count(*) FROM runs WHERE id = 'r1' AND state = 'failed' AND name = 'demo'") == 1);
  CHECK(count_rows(registry_file, "SELECT count(*) FROM allocations WHERE run_id = 'r1'") == 2);
  CHECK(count_rows(registry_file, "SELECT count(*) FROM failures WHERE run_id = 'r1' AND kind = 'worker.exit'") == 1);
  // The host.lost appended to the file after the start was not read back from disk.
  CHECK(count_rows(registry_file, "SELECT count(*) FROM host_events WHERE run_id = 'r1'") == 0);
  // The run's submit time is the file's (read once at the start), not the first observed event's.
  CHECK(count_rows(registry_file, "SELECT submitted_ms FROM runs WHERE id = 'r1'") == kStart);
}
