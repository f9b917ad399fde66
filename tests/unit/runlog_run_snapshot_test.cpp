// RunSnapshot, state.json as one struct: what it writes reads back equal, with every optional
// part set and with none; a file that lacks keys, has keys this dtrain does not know, holds a
// field of another type or comes from a newer dtrain; and the file the supervisor wrote before
// the struct existed reads and writes back the same.

#include <doctest/doctest.h>

#include <string>

#include "launcher/runlog/run_snapshot.h"
#include "launcher/runlog/run_state.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using nlohmann::json;

namespace {

/// A snapshot with every optional part set, as a run that failed once and recovered has.
RunSnapshot everything_set() {
  RunSnapshot s;
  s.run_id = "train-20261129-234101-a3f2";
  s.name = "train";
  s.tenant = "team-a";
  s.user = "alice";
  s.state = "failed";
  s.exit_code = 3;
  s.generation = 2;
  s.world_size = 4;
  s.restarts = 1;
  s.hosts = {{"gpu01", "connected", false, 4100}, {"gpu02", "lost", false, std::nullopt},
             {"spare01", "connected", true, std::nullopt}};
  s.excluded_hosts = {"gpu03"};
  s.supervisor = RunSnapshot::Supervisor{1234, "login1", 1'764'000'000'000, 987654};
  s.submitted_at_ms = 1'764'000'000'000;
  s.resumed_at_ms = 1'764'000'100'000;
  s.finished_at_ms = 1'764'000'200'000;
  s.updated_at_ms = 1'764'000'200'001;
  RunSnapshot::Rank running;
  running.rank = 0;
  running.host = "gpu01";
  running.pid = 5000;
  running.state = "running";
  running.step = 120;
  running.last_beat_ms = 1'764'000'199'000;
  running.metrics.loss = 0.7731;
  running.metrics.step_ms = 250.5;
  RunSnapshot::Rank killed = running;
  killed.rank = 1;
  killed.local_rank = 1;
  killed.dp = 1;
  killed.pp = 0;
  killed.tp = 1;
  killed.state = "killed";
  killed.exit = RunSnapshot::RankExit{std::nullopt, "SIGKILL"};
  RunSnapshot::Rank failed = running;
  failed.rank = 2;
  failed.state = "failed";
  failed.exit = RunSnapshot::RankExit{3, std::nullopt};
  s.ranks = {running, killed, failed};
  events::RecoveryCompleted completed;
  completed.kind = events::FailureKind::worker_exit;
  completed.cause.kind = events::FailureKind::worker_exit;
  completed.cause.host = "gpu02";
  completed.cause.detail = "killed by SIGKILL";
  completed.cause.rank = 1;
  completed.cause.local_rank = 1;
  completed.phases = {{"detect_ms", 31}, {"total_ms", 378}};
  completed.resume_step = 100;
  completed.last_step = 101;
  completed.steps_lost = 1;
  completed.world_size = 4;
  completed.restarts = 1;
  completed.action = "in-place";
  completed.fallback = "a survivor was missing";
  s.last_recovery = RunSnapshot::Recovery{1, completed};
  s.last_checkpoint_step = 100;
  s.hang_timeout = events::HangTimeoutChanged{1, 1500, 600000, 3000, events::HangTimeoutChanged::kStepTime, 5, 300, 12000};
  s.root_cause = RunSnapshot::RootCause{events::FailureKind::worker_exit, "gpu02", "exit code 3", 2, 0,
                                        "/runs/r/ranks/2.log", 5002, 3, std::nullopt,
                                        "Traceback ...\nValueError: bad batch\n"};
  s.stragglers = {{7, "gpu02", 0.16, 30.0}};
  s.goodput = {{"ratio", 0.9}, {"wall_seconds", 100.0}, {"lost_seconds", {{"restart", 10.0}}}};
  s.total_steps = 1000;
  s.spec_path = "/runs/r/spec.yaml";
  s.detached = true;
  return s;
}

Result<RunSnapshot> from_text(const std::string& text) { return RunSnapshot::from_json(json::parse(text)); }

}  // namespace

TEST_CASE("from_json(to_json(s)) == s with every optional part set, and with none") {
  RunSnapshot full = everything_set();
  Result<RunSnapshot> again = RunSnapshot::from_json(full.to_json());
  REQUIRE(again.ok());
  CHECK(*again == full);
  // The text the writer writes is the same JSON, and reads back the same.
  CHECK(json::parse(full.text()) == full.to_json());
  Result<RunSnapshot> from_file_text = from_text(full.text());
  REQUIRE(from_file_text.ok());
  CHECK(*from_file_text == full);

  RunSnapshot empty;
  Result<RunSnapshot> empty_again = RunSnapshot::from_json(empty.to_json());
  REQUIRE(empty_again.ok());
  CHECK(*empty_again == empty);
  json written = empty.to_json();
  // Keys the supervisor always writes are there as null; those it writes only when known are not.
  CHECK(written["tenant"].is_null());
  CHECK(written["exit_code"].is_null());
  CHECK(written["supervisor"].is_null());
  CHECK(written["last_recovery"].is_null());
  CHECK_FALSE(written.contains("hang_timeout"));
  CHECK(written["root_cause"].is_null());
  CHECK_FALSE(written.contains("total_steps"));
  CHECK_FALSE(written.contains("user"));

  // A root cause that is no rank's writes none of the rank's keys.
  RunSnapshot host_lost;
  host_lost.root_cause = RunSnapshot::RootCause{};
  host_lost.root_cause->kind = events::FailureKind::host_lost;
  json cause = host_lost.to_json()["root_cause"];
  CHECK(cause == json{{"kind", "host.lost"}, {"host", ""}, {"message", ""}});
  CHECK(*RunSnapshot::from_json(host_lost.to_json()) == host_lost);
}

TEST_CASE("a state.json without most keys reads with the defaults, and unknown keys are ignored") {
  Result<RunSnapshot> sparse = from_text(R"({"version": 1, "state": "running",
      "ranks": [{"rank": 3, "host": "gpu01"}], "supervisor": {"pid": 42},
      "a_newer_key": {"anything": [1, 2]}, "hosts": [{"name": "gpu01", "zone": "b"}]})");
  REQUIRE(sparse.ok());
  CHECK(sparse->state == "running");
  CHECK(sparse->run_id.empty());
  CHECK(sparse->generation == 0);
  CHECK_FALSE(sparse->exit_code);
  CHECK_FALSE(sparse->submitted_at_ms);
  CHECK_FALSE(sparse->last_recovery);
  CHECK_FALSE(sparse->hang_timeout);  // an older dtrain wrote none
  CHECK(sparse->stragglers.empty());
  REQUIRE(sparse->supervisor);
  CHECK(sparse->supervisor->pid == 42);
  CHECK(sparse->supervisor->hostname.empty());
  CHECK_FALSE(sparse->supervisor->proc_start_ticks);
  REQUIRE(sparse->ranks.size() == 1);
  CHECK(sparse->ranks[0].rank == 3);
  CHECK_FALSE(sparse->ranks[0].pid);
  CHECK_FALSE(sparse->ranks[0].exit);
  REQUIRE(sparse->hosts.size() == 1);
  CHECK(sparse->hosts[0].name == "gpu01");
  // null is the same as absent.
  Result<RunSnapshot> nulls = from_text(R"({"version": 1, "supervisor": null, "ranks": null, "tenant": null,
      "exit_code": null, "goodput": null})");
  REQUIRE(nulls.ok());
  CHECK(*nulls == RunSnapshot{});
}

TEST_CASE("a field of another type is an error naming the field and the file, never an exception") {
  CHECK(from_text(R"({"version": 1, "generation": "2"})").error().message.find("generation: expected an integer") == 0);
  Result<RunSnapshot> rank = from_text(R"({"version": 1, "ranks": [{"rank": 0}, {"rank": 1, "pid": "77"}]})");
  REQUIRE_FALSE(rank.ok());
  CHECK(rank.error().message.find("ranks[1]: pid: expected an integer, got a string \"77\"") == 0);
  Result<RunSnapshot> supervisor = from_text(R"({"version": 1, "supervisor": {"pid": 1, "hostname": 5}})");
  REQUIRE_FALSE(supervisor.ok());
  CHECK(supervisor.error().message.find("supervisor: hostname: expected a string") == 0);
  CHECK_FALSE(from_text(R"({"version": 1, "ranks": {"rank": 0}})").ok());  // an object, not a list
  CHECK_FALSE(from_text(R"({"version": 1, "ranks": [7]})").ok());
  CHECK_FALSE(from_text(R"({"version": 1, "supervisor": {"pid": 1e30}})").ok());  // out of an int's range
  CHECK_FALSE(from_text(R"({"version": 1, "root_cause": "oops"})").ok());
  Result<RunSnapshot> kind = from_text(R"({"version": 1, "root_cause": {"kind": "cosmic.ray"}})");
  REQUIRE_FALSE(kind.ok());
  CHECK(kind.error().message.find("root_cause: kind: 'cosmic.ray' is not a failure kind") == 0);
  CHECK_FALSE(from_text(R"({"version": 1, "last_recovery": {"gen": 1, "resume_step": "x"}})").ok());
  CHECK_FALSE(from_text(R"({"version": 1, "goodput": [1]})").ok());
  CHECK_FALSE(from_text(R"({"version": 1, "ranks": [{"exit": {"code": "3"}}]})").ok());
  CHECK_FALSE(RunSnapshot::from_json(json::array()).ok());

  testing::TempDir dir;
  std::string path = dir.write("state.json", R"({"version": 1, "state": "running", "hosts": [{"name": 3}]})");
  Result<RunSnapshot> read = read_state_file(path);
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().message.find(path + ": hosts[0]: name: expected a string, got 3") == 0);
  CHECK(read.error().kind == ErrorKind::infra);
}

TEST_CASE("a newer version says to upgrade, and no version or an older one is refused too") {
  Result<RunSnapshot> newer = from_text(R"({"version": 2, "state": {"a new": "shape"}})");
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.error().kind == ErrorKind::user);
  CHECK(newer.error().message.find("version 2 is newer than this dtrain reads (1)") != std::string::npos);
  CHECK(newer.error().message.find("upgrade dtrain") != std::string::npos);
  Result<RunSnapshot> none = from_text(R"({"state": "running"})");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message.find("no \"version\"") != std::string::npos);
  CHECK_FALSE(from_text(R"({"version": 0})").ok());
  CHECK(from_text(R"({"version": "1"})").error().message.find("version: expected an integer") == 0);
  CHECK(from_text(R"({"version": 1.0})").ok());
}

TEST_CASE("the state.json the supervisor wrote before RunSnapshot reads and writes back the same") {
  // As RunDriver::write_state wrote it by hand (keys sorted by nlohmann, "ranks" appended last).
  const std::string before = R"({
  "detached": false,
  "excluded_hosts": [],
  "exit_code": null,
  "finished_at_ms": null,
  "generation": 1,
  "goodput": {"finished": false, "ratio": 0.5, "restarts": 1, "lost_seconds": {"restart": 2.0}},
  "hosts": [{"name": "localhost", "spare": false, "state": "connected", "agent_pid": 4100},
            {"name": "spare1", "spare": true, "state": "connecting"}],
  "last_checkpoint_step": 40,
  "last_recovery": {"action": "restart", "cause": {"detail": "killed by SIGKILL", "host": "localhost",
                    "kind": "worker.exit", "local_rank": 1, "pid": 4002, "rank": 1, "signal": "SIGKILL"},
                    "ev": "recovery.completed", "gen": 1, "kind": "worker.exit", "last_step": 41,
                    "phases": {"detect_ms": 3, "total_ms": 300}, "restarts": 1, "resume_step": 40,
                    "steps_lost": 1, "world_size": 2},
  "name": "quick",
  "restarts": 1,
  "resumed_at_ms": null,
  "root_cause": {"host": "localhost", "kind": "worker.exit", "local_rank": 1, "log": "/r/ranks/1.log",
                 "message": "killed by SIGKILL", "pid": 4002, "rank": 1, "signal": "SIGKILL"},
  "run_id": "quick-20261129-234101-a3f2",
  "spec_path": "/r/spec.yaml",
  "state": "running",
  "stragglers": [{"host": "localhost", "median_step_ms": 30.0, "rank": 1, "score": 0.5}],
  "submitted_at_ms": 1764000000000,
  "supervisor": {"hostname": "login1", "pid": 4000, "proc_start_ticks": 123, "started_at_ms": 1764000000000},
  "tenant": null,
  "updated_at_ms": 1764000001000,
  "version": 1,
  "world_size": 2,
  "ranks": [
    {"rank": 0, "host": "localhost", "local_rank": 0, "dp": 0, "pp": 0, "tp": 0, "pid": 4001, "state": "running", "step": 41, "last_beat_ms": 1764000000900, "loss": 0.25, "step_ms": 30.5, "exit": null},
    {"rank": 1, "host": "localhost", "local_rank": 1, "dp": 1, "pp": 0, "tp": 0, "pid": null, "state": "pending", "step": null, "last_beat_ms": null, "exit": {"signal": "SIGKILL"}}
  ]
}
)";
  json original = json::parse(before);
  Result<RunSnapshot> read = RunSnapshot::from_json(original);
  REQUIRE(read.ok());
  CHECK(read->last_recovery->gen == 1);
  CHECK(read->last_recovery->completed.cause.rank == std::optional<int>(1));
  CHECK(read->hosts[0].agent_pid == std::optional<int64_t>(4100));
  CHECK(read->ranks[1].exit->signal == std::optional<std::string>("SIGKILL"));
  CHECK(json::parse(read->text()) == original);
}

TEST_CASE("the plain path on simdjson reads what the writer writes as from_json does, and leaves the rest to it") {
  RunSnapshot full = everything_set();
  std::optional<RunSnapshot> plain = read_plain_state(full.text());
  REQUIRE(plain);
  CHECK(*plain == full);
  RunSnapshot empty;
  REQUIRE(read_plain_state(empty.text()));
  CHECK(*read_plain_state(empty.text()) == empty);

  // A rank as a hand (or another tool) may write it: the plain path declines, the generic one
  // reads it (3.0 is an integer to from_json) or names what is wrong.
  std::string text = full.text();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string changed = text;
    size_t at = changed.find(from);
    REQUIRE(at != std::string::npos);
    changed.replace(at, from.size(), to);
    return changed;
  };
  std::string float_pid = with("\"pid\": 5000", "\"pid\": 5000.0");
  CHECK_FALSE(read_plain_state(float_pid));
  REQUIRE(from_text(float_pid).ok());
  CHECK(from_text(float_pid)->ranks[0].pid == 5000);
  std::string string_pid = with("\"pid\": 5000", "\"pid\": \"5000\"");
  CHECK_FALSE(read_plain_state(string_pid));
  REQUIRE_FALSE(from_text(string_pid).ok());
  CHECK(from_text(string_pid).error().message.find("ranks[0]") != std::string::npos);
  // A later duplicate key wins on both paths (nlohmann keeps the last).
  std::string twice = with("\"pid\": 5000", "\"pid\": 5000, \"pid\": 6000");
  REQUIRE(read_plain_state(twice));
  CHECK(read_plain_state(twice)->ranks[0].pid == 6000);
  CHECK(from_text(twice)->ranks[0].pid == 6000);
  // A later null is the default again, whatever came before (found by fuzz/run_snapshot).
  std::string renulled = with("\"pid\": 5000", "\"pid\": 5000, \"rank\": null, \"host\": null");
  REQUIRE(read_plain_state(renulled));
  CHECK(*read_plain_state(renulled) == *from_text(renulled));
  CHECK(read_plain_state(renulled)->ranks[0].host.empty());
  // Nulls keep the defaults; unknown keys are ignored.
  std::string sparse = with("\"pid\": 5000", "\"pid\": null, \"gpu_util\": [1, 2], \"exit\": {\"code\": null, \"why\": 1}");
  REQUIRE(read_plain_state(sparse));
  CHECK(*read_plain_state(sparse) == *from_text(sparse));
  CHECK_FALSE(read_plain_state(sparse)->ranks[0].pid);
  // Not JSON, or a head from_json refuses: nullopt, and read_state_file words the error.
  CHECK_FALSE(read_plain_state(text.substr(0, text.size() / 2)));
  CHECK_FALSE(read_plain_state(with("\"version\": 1", "\"version\": 99")));
}
