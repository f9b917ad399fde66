// The event catalogue: names are unique, dtrain(1) documents every one, and catalogue_problem()
// tells a conforming event from one that lacks a field or has an unknown name.

#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "launcher/events/event_catalogue.h"
#include "launcher/runlog/event_log.h"

using namespace dtrain;

TEST_CASE("every catalogue name is unique and documented in dtrain(1)") {
  std::ifstream man(std::string(DTRAIN_SOURCE_DIR) + "/man/dtrain.1");
  REQUIRE(man.good());
  std::stringstream text;
  text << man.rdbuf();
  // groff escapes '-' as '\-'; event names have none, but undo it for the search anyway.
  std::string page = text.str();
  std::set<std::string_view> names;
  for (const events::EventType& type : events::catalogue()) {
    CHECK_MESSAGE(names.insert(type.name).second, "duplicate: " << type.name);
    CHECK_MESSAGE(page.find(std::string(type.name)) != std::string::npos, type.name << " is not in man/dtrain.1");
    CHECK(!type.meaning.empty());
  }
  CHECK(names.size() >= 40);
}

TEST_CASE("catalogue_problem: conforming, unknown name, missing fields") {
  nlohmann::json lost = {{"ev", "host.lost"}, {"host", "h1"}, {"reason", "silent"}, {"was_connected", true}};
  CHECK(catalogue_problem(lost).empty());
  lost.erase("reason");
  CHECK(catalogue_problem(lost) == "host.lost lacks \"reason\"");
  CHECK(catalogue_problem({{"ev", "host.gone"}}) == "\"host.gone\" is not in the event catalogue");
  CHECK(catalogue_problem(nlohmann::json::object()) == "\"\" is not in the event catalogue");
}

// ---- the typed events (events.h): every catalogue name has a struct, and its to_json writes
// the name and every field the catalogue says is always there.

#include <tuple>

#include "launcher/events/events.h"

namespace {

events::FailureCause sample_cause() {
  events::FailureCause cause{events::FailureKind::worker_exit, "h1", "exit code 3"};
  cause.rank = 2;
  cause.local_rank = 0;
  cause.pid = 4242;
  cause.code = 3;
  return cause;
}

/// One of every event, with sample values and every optional field set.
auto sample_events() {
  using namespace events;
  return std::make_tuple(
      RunSubmitted{"run-1", "demo", "team", "alice", "/tmp/spec.yaml", {"h1", "h2"}, 4, "0.1.0", 100, "launch", false},
      RunResumed{"failed", 100, "launch", 2500, 40, 3, 101, "launch", "0.1.0", true},
      RunState{"running", "every worker started"}, RunStopRequested{"SIGINT"},
      RunFinished{"succeeded", 0, 1, 2, 9000, {nlohmann::json{{"ev", kFailureDetected}}},
                  RunRootCause{events::FailureKind::worker_exit, "h1", 2, "exit code 3", "Traceback ..."}, "gave up"},
      RunlogDropped{4096, 3, "fell behind", {{"rank_output", 2}, {"worker.started", 1}}, "2026-12-02T18:00:00.000Z",
                    "2026-12-02T18:00:05.000Z"}, SshInsecure{"host keys are not checked"},
      RuntimeDirFallback{"/tmp/dtrain-0-Ab12Cd/3fa2c1d0", "runtime directory '/tmp/dtrain-0' belongs to uid 65534"},
      KubernetesCreated{{"ml", "llm-20261206-021500-ab12", "llm-20261206-021500-ab12", KubernetesKind::jobset},
                        "dtrain.io/run=llm-20261206-021500-ab12,dtrain.io/job=llm-20261206-021500-ab12", 4},
      KubernetesDeleted{{"ml", "llm-20261206-021500-ab12", "llm-20261206-021500-ab12", KubernetesKind::jobset},
                        "the run ended (succeeded)", "kubectl delete jobsets.jobset.x-k8s.io: forbidden"},
      HostConnected{"h1", 77, "0.1.0", -3, "h0"}, HostReattached{"h5", "h4", 180, 240, 8}, HostFacts{"h1", {{"cpus", 8}, {"os", "Linux"}}},
      HostStack{"h1", {{"torch", "2.3.1"}, {"file train.py", "ab12"}}, 42, {"python: killed after 5s"}},
      HostHealth{"h2", "start", "fail", "left out", {{"network ports", "fail", "mlx5_0 port 1 is 1: DOWN"}}, 30, "h2 failed"},
      HostQuarantined{"h2", "failed its health check (start)", {"network ports: mlx5_0 port 1 is 1: DOWN"}, 604800000},
      StackConsistency{"strict", StackConsistency::kDiffers, StackConsistency::kRefused, {"h1", "h2", "h3"},
                       {{"h3", "torch", "9.9.9", "2.3.1", 2}}, {"h2: image"}, "h3 differs"},
      HostFailed{"h1", "ssh: refused"},
      HostLost{"h1", "silent", true, 5000}, HostExcluded{{"h1", 3, "excluded after 3"}},
      HostExclusionSkipped{{"h1", 3, "no plan can spare it"}}, AgentError{"h1", "no such file"},
      ProtocolError{"worker", "h1", "bad json", 1, 4242, 0, 2},
      SignalRefused{-1, "SIGKILL", "internal bug: refused to signal pid -1 with SIGKILL"},
      PlanGeneration{0, 4, 4, 1, 1, 1, -1, {"h1", "h2"}}, PlanChanged{"- h2", {"h2"}},
      PlanQuarantined{{{"h3", "failed its health check (start)", "2026-12-12T08:00:00Z"}}},
      GenerationSpawned{0, "10.0.0.1", 29500, "gloo", -1, "/ckpt"}, GenerationStepped{0, 1, 800},
      WorkerStarted{2, "h1", 0, 4242}, WorkerSpawnFailed{2, "h1", "ENOENT"},
      WorkerExit{0, 2, "h1", 4242, 0, 3, std::nullopt, "/run/ranks/2.log", {"Traceback"},
                 WorkerError{"bad batch", "ValueError", "...", 1700000000}},
      WorkerHang{2, "h1", 4242, 30, "train", 61000, 60000}, WorkerSample{2, "h1", 4242, "no gdb"}, CommReady{4, 1200},
      CommWarn{0, 2, "h1", "NCCL WARN x", 5, 10.0, "5 more"}, HangDump{0, 2, "h1", 4242, 1024, "none", "/keep", "kept"},
      HangDetectionOff{{1, 2}, "not watched"}, HangDetectionOn{{1}, 9000, "watched"},
      HangTimeoutChanged{1, 1500, 600000, 3000, HangTimeoutChanged::kStepTime, 5, 300, 12000},
      StragglerDetected{{0, "h1", 2, 0.5, 200.0, 100.0}}, StragglerCleared{{0, "h1", 2, 0.95, 105.0, 100.0}},
      GpuXid{"h1", 0, 79}, GpuEccErrors{"h1", 0, 2, 1}, FailureDetected{sample_cause(), 150, "dtrain resume"},
      FailureRootCause{2, "h1", "failed earlier"}, FailureBudgetExhausted{3, 600000, "no restart left"},
      FailureCrashLoop{3, "no progress"}, FailureUnrecoverable{"no plan"},
      RecoveryStarted{sample_cause(), 1, "restart", "within budget"},
      RecoveryCompleted{events::FailureKind::worker_exit, sample_cause(), {{"total_ms", 900}}, 10, 14, 4, 4, 1, "restart"},
      RecoveryCarriedOver{1, "h1", {0, 1}, {4242, 4243}}, RecoveryFallback{1, "rank 3 had ended"},
      ResourcesReleased{0, "h1", {4242}, 0, 35}, ResourcesUnconfirmed{{"h2"}, "no confirmation"},
      CheckpointCommitted{0, 0, "h1", 10, 1 << 20, 0.5}, CheckpointRejected{0, 0, "h1", 10, "checksum"},
      CheckpointRequested{0, "SIGUSR1", 12, 4},
      DrillInjected{"kill-rank", "rank 2", 4242, 10, 0, 9, "shard-0.pt", std::vector<int>{4242}, "signal", "kill -9", 3000},
      DrillCorrupted{9, "shard-0.pt", "committed after the damage"},
      DrillVerdict{{{"drill_id", "d1"}, {"verdict", "pass"}, {"exit_code", 0}, {"faults", nlohmann::json::array()}}});
}

}  // namespace

TEST_CASE("every typed event writes its name and the catalogue's fields, and every name has one") {
  std::set<std::string> written;
  std::apply([&](const auto&... event) {
    (([&] {
       nlohmann::json json = event.to_json();
       std::string name = event.name;
       CHECK(json.value("ev", "") == name);
       CHECK_MESSAGE(catalogue_problem(json).empty(), catalogue_problem(json));
       CHECK_MESSAGE(!json.contains("ts"), name << ": \"ts\" is the log's to add");
       CHECK_MESSAGE(written.insert(name).second, name << " has two structs");
     }()),
     ...);
  }, sample_events());
  for (const events::EventType& type : events::catalogue()) {
    CHECK_MESSAGE(written.count(std::string(type.name)) == 1, type.name << " has no struct in events.h");
  }
}

TEST_CASE("typed events leave absent optional fields out rather than writing null") {
  nlohmann::json lost = events::HostLost{"h1", "connection closed", true, std::nullopt}.to_json();
  CHECK(lost == nlohmann::json{{"ev", "host.lost"}, {"host", "h1"}, {"reason", "connection closed"}, {"was_connected", true}});

  events::FailureCause lost_host{events::FailureKind::host_lost, "h2", "silent"};
  CHECK(events::FailureDetected{lost_host, std::nullopt, std::nullopt}.to_json() ==
        nlohmann::json{{"ev", "failure.detected"}, {"kind", "host.lost"}, {"host", "h2"}, {"detail", "silent"}});

  nlohmann::json first_warn = events::CommWarn{1, 3, "h1", "NCCL WARN x"}.to_json();
  CHECK(first_warn == nlohmann::json{{"ev", "comm.warn"}, {"gen", 1}, {"rank", 3}, {"host", "h1"}, {"line", "NCCL WARN x"}});

  nlohmann::json finished = events::RunFinished{"succeeded", 0, 0, 1, 500}.to_json();
  CHECK(!finished.contains("incidents"));
  CHECK(!finished.contains("root_cause"));
  CHECK(!finished.contains("reason"));

  // An agent's facts: the known keys as they came, nothing else.
  nlohmann::json facts = events::HostFacts{"h1", {{"cpus", 8}, {"ev", "forged"}, {"secret", 1}}}.to_json();
  CHECK(facts == nlohmann::json{{"ev", "host.facts"}, {"host", "h1"}, {"cpus", 8}});
}

// ---- reading events back (from_json, the Event variant)

#include "launcher/events/event.h"

TEST_CASE("every typed event reads back equal: from_json(to_json(e)) == e, through the Event variant too") {
  std::apply([&](const auto&... event) {
    (([&] {
       using Type = std::decay_t<decltype(event)>;
       nlohmann::json json = event.to_json();
       Result<Type> back = Type::from_json(json);
       REQUIRE_MESSAGE(back.ok(), event.name << ": " << back.error().message);
       CHECK_MESSAGE(*back == event, event.name << " read back differs: " << back->to_json().dump());

       json["ts"] = "2026-12-02T18:00:00.000Z";  // as the log holds it
       Result<events::Event> any = events::parse_event(json);
       REQUIRE_MESSAGE(any.ok(), event.name << ": " << any.error().message);
       REQUIRE_MESSAGE(std::holds_alternative<Type>(*any), event.name << " parsed as another alternative");
       CHECK(std::get<Type>(*any) == event);
       CHECK(events::event_name(*any) == event.name);
       CHECK(events::to_json(*any) == event.to_json());
     }()),
     ...);
  }, sample_events());
  // One alternative per catalogue name, and UnknownEvent.
  CHECK(std::variant_size_v<events::Event> == events::catalogue().size() + 1);
}

TEST_CASE("failure kinds: one name each, read back by name, documented in dtrain(1), another name is an error") {
  std::ifstream man(std::string(DTRAIN_SOURCE_DIR) + "/man/dtrain.1");
  REQUIRE(man.good());
  std::stringstream text;
  text << man.rdbuf();
  std::set<std::string_view> names;
  for (const events::FailureKindInfo& info : events::kFailureKinds) {
    CHECK_MESSAGE(names.insert(info.name).second, "duplicate: " << info.name);
    CHECK(events::to_string(info.kind) == info.name);
    CHECK(events::parse_failure_kind(info.name) == info.kind);
    CHECK(!info.meaning.empty());
    CHECK_MESSAGE(text.str().find(std::string(info.name)) != std::string::npos, info.name << " is not in man/dtrain.1");
  }
  CHECK(names.size() == 8);  // one per enumerator of FailureKind
  CHECK(!events::parse_failure_kind("worker.crash"));

  Result<events::Event> unknown_kind =
      events::parse_event({{"ev", "failure.detected"}, {"kind", "worker.crash"}, {"host", "h1"}, {"detail", "x"}});
  REQUIRE(!unknown_kind.ok());
  CHECK(unknown_kind.error().message.find("'worker.crash' is not a failure kind (worker.exit, worker.spawn") !=
        std::string::npos);
  Result<events::Event> launch = events::parse_event(
      {{"ev", "failure.detected"}, {"kind", "launch.timeout"}, {"host", "h1"}, {"detail", "rank 0's port"}});
  REQUIRE(launch.ok());
  CHECK(std::get<events::FailureDetected>(*launch).cause.kind == events::FailureKind::launch_timeout);
}

TEST_CASE("parse_event: an unknown name is kept as it came, a mistyped field is an error that names it") {
  nlohmann::json newer = {{"ts", "2026-12-02T18:00:00.000Z"}, {"ev", "gpu.throttled"}, {"host", "h1"}, {"mhz", 900}};
  Result<events::Event> unknown = events::parse_event(newer);
  REQUIRE(unknown.ok());
  REQUIRE(std::holds_alternative<events::UnknownEvent>(*unknown));
  CHECK(events::event_name(*unknown) == "gpu.throttled");
  CHECK(events::to_json(*unknown) == nlohmann::json{{"ev", "gpu.throttled"}, {"host", "h1"}, {"mhz", 900}});

  Result<events::Event> bad = events::parse_event({{"ev", "worker.exit"}, {"rank", "two"}});
  REQUIRE(!bad.ok());
  CHECK(bad.error().message.find("worker.exit.rank") != std::string::npos);
  CHECK(bad.error().message.find("expected an integer") != std::string::npos);

  Result<events::Event> bad_cause =
      events::parse_event({{"ev", "recovery.started"}, {"cause", {{"kind", "worker.exit"}, {"rank", 1.5}}}});
  REQUIRE(!bad_cause.ok());
  CHECK(bad_cause.error().message.find("cause.rank") != std::string::npos);

  CHECK(!events::parse_event({{"ev", 3}}).ok());
  CHECK(!events::parse_event(nlohmann::json::array()).ok());
}

TEST_CASE("from_json: an absent field keeps its default (an older dtrain wrote fewer)") {
  Result<events::WorkerExit> exit = events::WorkerExit::from_json({{"ev", "worker.exit"}, {"rank", 3}, {"code", 1}});
  REQUIRE(exit.ok());
  CHECK(exit->rank == 3);
  CHECK(exit->code == 1);
  CHECK(exit->gen == 0);
  CHECK(!exit->signal);
  CHECK(exit->tail.empty());
  CHECK(!exit->error);

  Result<events::FailureCause> cause = events::FailureCause::from_json({{"kind", "host.lost"}});
  REQUIRE(cause.ok());
  CHECK(cause->local_rank == -1);
  CHECK(!cause->rank);
}

TEST_CASE("kubernetes.created's kind: Job or JobSet by name, absent in an older log is a Job, another is an error") {
  events::KubernetesCreated created{{"ml", "r-1", "r-1", events::KubernetesKind::jobset}, "dtrain.io/run=r-1,dtrain.io/job=r-1", 2};
  CHECK(created.to_json()["kind"] == "JobSet");
  created.kind = events::KubernetesKind::job;
  CHECK(created.to_json()["kind"] == "Job");

  // As dtrain wrote it before it created JobSets: no kind.
  nlohmann::json older = {{"ev", "kubernetes.created"}, {"namespace", "ml"}, {"job", "r-1"}, {"service", "r-1"},
                          {"selector", "dtrain.io/run=r-1,dtrain.io/job=r-1"}, {"pods", 2}};
  Result<events::Event> read = events::parse_event(older);
  REQUIRE_MESSAGE(read.ok(), read.error().message);
  CHECK(std::get<events::KubernetesCreated>(*read).kind == events::KubernetesKind::job);
  Result<events::KubernetesDeleted> deleted = events::KubernetesDeleted::from_json(
      {{"ev", "kubernetes.deleted"}, {"namespace", "ml"}, {"job", "r-1"}, {"service", "r-1"}, {"why", "the run ended"}});
  REQUIRE(deleted.ok());
  CHECK(deleted->kind == events::KubernetesKind::job);

  older["kind"] = "StatefulSet";
  Result<events::Event> bad = events::parse_event(older);
  REQUIRE(!bad.ok());
  CHECK_MESSAGE(bad.error().message.find("kubernetes.created.kind") != std::string::npos, bad.error().message);
  CHECK_MESSAGE(bad.error().message.find("'StatefulSet' is not what kubernetes.job creates (Job, JobSet)") !=
                    std::string::npos,
                bad.error().message);
}
