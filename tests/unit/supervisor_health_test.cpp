// Health gates in the supervisor (issue 29), driven by scripted events and a fake clock: the first
// generation waits for every planned host's `start` checks; a host that fails one is left out (a
// spare takes its place) and quarantined; a warning or a late answer lets a host in; before a
// recovery's next generation the joining spare and the blamed host are checked, and a failure
// there leaves them out (in place too: no replacement starts before the answer, and a failure
// makes the attempt a restart without the host); the root cause of health.quarantine.after
// failures is quarantined.

#include <doctest/doctest.h>

#include <algorithm>

#include "launcher/events/events.h"
#include "launcher/proto/host_health.h"
#include "launcher/supervisor/supervisor.h"

using namespace dtrain;
using namespace dtrain::supervisor;

namespace {

spec::JobSpec make_spec(int hosts, int spares) {
  spec::JobSpec spec;
  spec.name = "health";
  auto host_named = [](const std::string& name, bool spare) {
    spec::HostEntry host;
    host.name = name;
    host.slots = 1;
    host.spare = spare;
    return host;
  };
  for (int i = 0; i < hosts; ++i) spec.hosts.push_back(host_named("h" + std::to_string(i + 1), false));
  for (int i = 0; i < spares; ++i) spec.spares.push_back(host_named("s" + std::to_string(i + 1), true));
  spec.worker.command = {"train"};
  spec.stop_grace = Millis(2000);
  spec.heartbeat.interval = Millis(500);
  spec.heartbeat.timeout = Millis(5000);
  spec.heartbeat.hang_timeout = Millis(20000);
  spec.elastic.max_restarts = 10;
  return spec;
}

template <class T>
std::vector<T> of_type(const std::vector<Action>& actions) {
  std::vector<T> found;
  for (const Action& action : actions) {
    if (const T* typed = std::get_if<T>(&action)) found.push_back(*typed);
  }
  return found;
}

template <class E>
std::vector<E> recorded(const std::vector<Action>& actions) {
  std::vector<E> found;
  for (const RecordEvent& record : of_type<RecordEvent>(actions)) {
    if (record.event.value("ev", "") != E::name) continue;
    Result<E> read = E::from_json(record.event);
    REQUIRE(read);
    found.push_back(*read);
  }
  return found;
}

events::HostHealth report(const std::string& host, const std::string& moment, const std::string& verdict,
                          const std::string& check = "checkpoint dir", const std::string& message = "writable") {
  return events::HostHealth{host, moment, verdict, "", {{check, verdict, message}}, 12, ""};
}

std::vector<std::string> plan_hosts(const plan::RankPlan& plan) {
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : plan.hosts) hosts.push_back(host.entry.name);
  return hosts;
}

struct Harness {
  explicit Harness(spec::JobSpec spec_in) : spec(std::move(spec_in)) {
    Result<plan::RankPlan> plan = plan::make_plan(spec);
    REQUIRE(plan.ok());
    supervisor = std::make_unique<Supervisor>(spec, *plan, clock);
  }
  std::vector<Action> feed(const Event& event) {
    auto actions = supervisor->on_event(event);
    all.insert(all.end(), actions.begin(), actions.end());
    return actions;
  }
  /// Every host and spare connects, its agent asked for checks.
  void connect_all() {
    for (const auto& list : {spec.hosts, spec.spares}) {
      for (const spec::HostEntry& host : list) feed(HostConnected{host.name, std::nullopt, true});
    }
  }
  std::vector<Action> healthy(const std::string& host, const std::string& moment = events::HostHealth::kStart) {
    return feed(HostHealthReported{host, report(host, moment, "ok")});
  }
  void start_all(int gen) {
    for (int rank = 0; rank < supervisor->current_plan().world_size; ++rank) feed(WorkerStarted{gen, rank, 1000 + rank});
  }
  std::vector<Action> release_all(int gen, const std::vector<std::string>& hosts) {
    std::vector<Action> actions;
    for (const std::string& host : hosts) {
      auto more = feed(GenerationReleased{gen, host});
      actions.insert(actions.end(), more.begin(), more.end());
    }
    return actions;
  }
  WorkerExited crash(int gen, int rank) {
    WorkerExited exited;
    exited.gen = gen;
    exited.rank = rank;
    exited.pid = 1000 + rank;
    exited.code = 1;
    exited.observed_ms = clock.wall_ms();
    return exited;
  }
  spec::JobSpec spec;
  FakeClock clock;
  std::unique_ptr<Supervisor> supervisor;
  std::vector<Action> all;
};

}  // namespace

TEST_CASE("health start gate: no generation before every planned host reported its checks") {
  Harness h(make_spec(2, 0));
  h.connect_all();
  CHECK(of_type<StartGeneration>(h.all).empty());
  h.healthy("h1");
  CHECK(of_type<StartGeneration>(h.all).empty());
  auto actions = h.healthy("h2");
  REQUIRE(of_type<StartGeneration>(actions).size() == 1);
  auto health = recorded<events::HostHealth>(h.all);
  REQUIRE(health.size() == 2);
  CHECK(health[0].action == events::HostHealth::kAdmitted);
  CHECK(h.supervisor->host_health().size() == 2);
}

TEST_CASE("health start gate: a host that fails a check is left out, quarantined, and a spare takes its place") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.healthy("h1");
  h.feed(HostHealthReported{"h2", report("h2", "start", "fail", "network ports", "mlx5_0 port 1 is 1: DOWN; check the cable")});
  h.healthy("s1");
  auto starts = of_type<StartGeneration>(h.all);
  REQUIRE(starts.size() == 1);
  CHECK(plan_hosts(starts[0].plan) == std::vector<std::string>{"h1", "s1"});
  auto health = recorded<events::HostHealth>(h.all);
  auto left_out = std::find_if(health.begin(), health.end(), [](const auto& e) { return e.host == "h2"; });
  REQUIRE(left_out != health.end());
  CHECK(left_out->action == events::HostHealth::kLeftOut);
  CHECK(left_out->detail.find("mlx5_0 port 1 is 1: DOWN") != std::string::npos);
  auto quarantined = recorded<events::HostQuarantined>(h.all);
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0].host == "h2");
  CHECK(quarantined[0].evidence == std::vector<std::string>{"network ports: mlx5_0 port 1 is 1: DOWN; check the cable"});
  CHECK(quarantined[0].duration_ms == h.spec.health.quarantine_duration.count());
  CHECK(h.supervisor->excluded_hosts().count("h2") == 1);
}

TEST_CASE("health start gate: a spare that fails is never planned, the run starts on its hosts") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.feed(HostHealthReported{"s1", report("s1", "start", "fail", "leftover gpu memory", "gpu 0: 3 GiB held by pid 42")});
  h.healthy("h1");
  h.healthy("h2");
  auto starts = of_type<StartGeneration>(h.all);
  REQUIRE(starts.size() == 1);
  CHECK(plan_hosts(starts[0].plan) == std::vector<std::string>{"h1", "h2"});
  CHECK(h.supervisor->excluded_hosts().count("s1") == 1);
}

TEST_CASE("health start gate: with no spare and no room to shrink, a failed host ends the run before it starts") {
  spec::JobSpec spec = make_spec(2, 0);
  spec.elastic.min_hosts = 2;
  Harness h(spec);
  h.connect_all();
  h.healthy("h1");
  h.feed(HostHealthReported{"h2", report("h2", "start", "fail", "site command", "exit 1: bad fan")});
  CHECK(of_type<StartGeneration>(h.all).empty());
  auto finish = of_type<FinishRun>(h.all);
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::hosts_lost);
  CHECK(h.supervisor->give_up_reason().find("bad fan") != std::string::npos);
}

TEST_CASE("health start gate: a warning lets the host in, and a host that never answers is admitted unchecked") {
  Harness h(make_spec(2, 0));
  h.connect_all();
  h.feed(HostHealthReported{"h1", report("h1", "start", "warn", "site command", "killed after 30s")});
  CHECK(of_type<StartGeneration>(h.all).empty());
  h.clock.advance_ms(1000);
  h.feed(Tick{});
  CHECK(of_type<StartGeneration>(h.all).empty());  // h2's checks still within their limits
  h.clock.advance_ms((h.spec.health.write_timeout + h.spec.health.reclaim_wait + Millis(11000)).count());
  h.feed(Tick{});
  REQUIRE(of_type<StartGeneration>(h.all).size() == 1);
  auto health = recorded<events::HostHealth>(h.all);
  REQUIRE(health.size() == 2);
  CHECK(health[0].action == events::HostHealth::kAdmitted);
  CHECK(health[0].detail.find("killed after 30s") != std::string::npos);
  CHECK(health[1].host == "h2");
  CHECK(health[1].action == events::HostHealth::kUnchecked);
  CHECK(recorded<events::HostQuarantined>(h.all).empty());
}

TEST_CASE("health at a recovery: the spare that replaces a lost host is checked before the next generation") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  for (const char* host : {"h1", "h2", "s1"}) h.healthy(host);
  h.start_all(0);
  h.feed(HostLost{"h2", "silent", 5000});
  h.all.clear();
  h.release_all(0, {"h1"});
  auto checks = of_type<CheckHostHealth>(h.all);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].host == "s1");
  CHECK(checks[0].moment == events::HostHealth::kJoin);
  CHECK_FALSE(checks[0].diagnose);
  CHECK(of_type<StartGeneration>(h.all).empty());
  auto actions = h.healthy("s1", events::HostHealth::kJoin);
  auto starts = of_type<StartGeneration>(actions);
  REQUIRE(starts.size() == 1);
  CHECK(plan_hosts(starts[0].plan) == std::vector<std::string>{"h1", "s1"});
}

TEST_CASE("health at a recovery: the blamed host is checked with the site's diagnose, and left out when it fails") {
  spec::JobSpec spec = make_spec(2, 1);
  spec.health.diagnose = "dcgmi diag -r 1";
  Harness h(spec);
  h.connect_all();
  for (const char* host : {"h1", "h2", "s1"}) h.healthy(host);
  h.start_all(0);
  h.feed(h.crash(0, 1));  // rank 1 on h2
  h.all.clear();
  h.release_all(0, {"h1", "h2"});
  auto checks = of_type<CheckHostHealth>(h.all);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].host == "h2");
  CHECK(checks[0].moment == events::HostHealth::kAfterFailure);
  CHECK(checks[0].diagnose);
  h.all.clear();
  h.feed(HostHealthReported{"h2", report("h2", "after failure", "fail", "site diagnose", "exit 1: GPU 0 memory test failed")});
  // h2 is out: the spare joins, and is checked in turn before the generation starts.
  auto joins = of_type<CheckHostHealth>(h.all);
  REQUIRE(joins.size() == 1);
  CHECK(joins[0].host == "s1");
  CHECK(of_type<StartGeneration>(h.all).empty());
  h.healthy("s1", events::HostHealth::kJoin);
  auto starts = of_type<StartGeneration>(h.all);
  REQUIRE(starts.size() == 1);
  CHECK(plan_hosts(starts[0].plan) == std::vector<std::string>{"h1", "s1"});
  REQUIRE(recorded<events::HostQuarantined>(h.all).size() == 1);
  CHECK(std::count(h.supervisor->quarantined_hosts().begin(), h.supervisor->quarantined_hosts().end(), "h2") == 1);
  // The time the checks took is a phase of the recovery, beside the others.
  h.start_all(1);
  h.all.clear();
  WorkerProgress beat{1, 0, 1, std::nullopt};
  h.feed(beat);
  auto completed = recorded<events::RecoveryCompleted>(h.all);
  REQUIRE(completed.size() == 1);
  CHECK(completed[0].phases.contains("health_ms"));
}

// ---- in place (elastic.in_place): the same gate before a replacement starts ------------------

namespace {

/// Two hosts and `spares` spares, elastic.in_place, every host healthy, generation 0 at step 50.
struct InPlaceHealth : Harness {
  explicit InPlaceHealth(int spares) : Harness(in_place_spec(spares)) {
    connect_all();
    for (const auto& list : {spec.hosts, spec.spares}) {
      for (const spec::HostEntry& host : list) healthy(host.name);
    }
    start_all(0);
    for (int rank = 0; rank < 2; ++rank) feed(WorkerProgress{0, rank, 50, std::nullopt});
    REQUIRE(supervisor->state() == RunState::running);
    all.clear();
  }
  static spec::JobSpec in_place_spec(int spares) {
    spec::JobSpec spec = make_spec(2, spares);
    spec.elastic.in_place = true;
    spec.elastic.max_restarts = 3;
    return spec;
  }
};

}  // namespace

TEST_CASE("health in place: the crashed rank's host is checked before its replacement starts, and the wait is health_ms") {
  InPlaceHealth h(0);
  h.feed(h.crash(0, 1));  // rank 1 on h2
  auto checks = of_type<CheckHostHealth>(h.all);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].host == "h2");
  CHECK(checks[0].moment == events::HostHealth::kAfterFailure);
  CHECK(of_type<ContinueInPlace>(h.all).empty());
  CHECK(of_type<StopGeneration>(h.all).empty());  // the survivor on h1 keeps running
  CHECK(h.supervisor->phase() == Supervisor::Phase::in_place_killing);
  CHECK(h.supervisor->state() == RunState::recovering);

  h.clock.advance_ms(25);
  auto continued = of_type<ContinueInPlace>(h.healthy("h2", events::HostHealth::kAfterFailure));
  REQUIRE(continued.size() == 1);
  CHECK(continued[0].replaced == std::vector<int>{1});
  CHECK(continued[0].hosts == std::vector<std::string>{"h1", "h2"});
  h.clock.advance_ms(10);
  h.feed(SurvivorsCarriedOver{1, "h1", {0}, {1000}});
  h.feed(SurvivorsCarriedOver{1, "h2", {}, {}});
  h.feed(WorkerStarted{1, 1, 2001});
  for (int rank = 0; rank < 2; ++rank) h.feed(WorkerCommReady{1, rank});
  h.feed(WorkerProgress{1, 0, 51, std::nullopt});
  auto completed = recorded<events::RecoveryCompleted>(h.all);
  REQUIRE(completed.size() == 1);
  CHECK(completed[0].action == "in-place");
  CHECK(completed[0].phases["health_ms"] == 25);
  CHECK(completed[0].phases["abort_ms"] == 10);  // from the continue, not from the decision
  CHECK(completed[0].steps_lost == 0);
}

TEST_CASE("health in place: a spare that fails its join check is left out, and the recovery restarts on the next spare") {
  InPlaceHealth h(2);
  h.feed(HostLost{"h2", "silent", 5000});
  auto checks = of_type<CheckHostHealth>(h.all);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].host == "s1");
  CHECK(checks[0].moment == events::HostHealth::kJoin);
  CHECK(of_type<ContinueInPlace>(h.all).empty());

  h.feed(HostHealthReported{"s1", report("s1", "join", "fail", "network ports", "mlx5_0 port 1 is 1: DOWN")});
  auto fallback = recorded<events::RecoveryFallback>(h.all);
  REQUIRE(fallback.size() == 1);
  CHECK(fallback[0].detail.find("s1 failed its health check (network ports") != std::string::npos);
  CHECK(of_type<ContinueInPlace>(h.all).empty());  // no replacement was ever started on s1
  REQUIRE(of_type<StopGeneration>(h.all).size() == 1);
  CHECK(h.supervisor->excluded_hosts().count("s1") == 1);
  REQUIRE(recorded<events::HostQuarantined>(h.all).size() == 1);

  h.all.clear();
  h.release_all(0, {"h1", "s1"});
  auto joins = of_type<CheckHostHealth>(h.all);
  REQUIRE(joins.size() == 1);
  CHECK(joins[0].host == "s2");
  h.healthy("s2", events::HostHealth::kJoin);
  auto starts = of_type<StartGeneration>(h.all);
  REQUIRE(starts.size() == 1);
  CHECK(plan_hosts(starts[0].plan) == std::vector<std::string>{"h1", "s2"});
}

TEST_CASE("health in place: a hung rank is killed while its host checks itself, and the replacement waits for both") {
  InPlaceHealth h(0);
  h.feed(WorkerProgress{0, 0, 51, std::nullopt});
  h.clock.advance_ms(15000);
  h.feed(WorkerProgress{0, 0, 52, std::nullopt});
  h.clock.advance_ms(6000);  // rank 1 silent for 21 s > hang_timeout 20 s
  h.feed(Tick{});
  REQUIRE(of_type<KillRanks>(h.all).size() == 1);
  auto checks = of_type<CheckHostHealth>(h.all);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].host == "h2");
  CHECK(h.supervisor->phase() == Supervisor::Phase::in_place_killing);

  WorkerExited killed = h.crash(0, 1);
  killed.code.reset();
  killed.signal = "SIGKILL";
  CHECK(of_type<ContinueInPlace>(h.feed(killed)).empty());  // the health answer is still due
  auto continued = of_type<ContinueInPlace>(h.healthy("h2", events::HostHealth::kAfterFailure));
  REQUIRE(continued.size() == 1);
  CHECK(continued[0].replaced == std::vector<int>{1});
}

TEST_CASE("health in place: a health answer that never comes makes the attempt fall back at in_place_timeout, naming the host") {
  InPlaceHealth h(0);
  h.feed(h.crash(0, 1));
  REQUIRE(of_type<CheckHostHealth>(h.all).size() == 1);
  h.clock.advance_ms(h.spec.in_place_timeout().count() + 1);
  h.feed(Tick{});
  auto fallback = recorded<events::RecoveryFallback>(h.all);
  REQUIRE(fallback.size() == 1);
  CHECK(fallback[0].detail.find("no health answer from h2") != std::string::npos);
}

TEST_CASE("health: the root cause of health.quarantine.after failures within the window is quarantined once") {
  spec::JobSpec spec = make_spec(2, 0);
  spec.health.quarantine_after = 3;
  spec.elastic.exclude_after = 0;  // keep h2 in the plan: only the quarantine is under test
  Harness h(spec);
  h.connect_all();
  h.healthy("h1");
  h.healthy("h2");
  for (int gen = 0; gen < 4; ++gen) {
    h.start_all(gen);
    for (int rank = 0; rank < 2; ++rank) h.feed(WorkerProgress{gen, rank, gen * 10 + 5, std::nullopt});
    h.feed(h.crash(gen, 1));
    h.release_all(gen, {"h1", "h2"});
    h.healthy("h2", events::HostHealth::kAfterFailure);
    h.clock.advance_ms(1000);
  }
  auto quarantined = recorded<events::HostQuarantined>(h.all);
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0].host == "h2");
  CHECK(quarantined[0].reason.find("root cause of 3 failures") != std::string::npos);
  CHECK(quarantined[0].evidence.size() == 3);
}

TEST_CASE("health: failures spread wider than the window do not quarantine") {
  spec::JobSpec spec = make_spec(2, 0);
  spec.health.quarantine_after = 2;
  spec.health.quarantine_window = Millis(60'000);
  spec.elastic.exclude_after = 0;
  Harness h(spec);
  h.connect_all();
  h.healthy("h1");
  h.healthy("h2");
  for (int gen = 0; gen < 3; ++gen) {
    h.start_all(gen);
    for (int rank = 0; rank < 2; ++rank) h.feed(WorkerProgress{gen, rank, gen * 10 + 5, std::nullopt});
    h.feed(h.crash(gen, 1));
    h.release_all(gen, {"h1", "h2"});
    h.healthy("h2", events::HostHealth::kAfterFailure);
    h.clock.advance_ms(120000);
  }
  CHECK(recorded<events::HostQuarantined>(h.all).empty());
}

TEST_CASE("health: agents not asked for checks are not waited for") {
  Harness h(make_spec(2, 0));
  h.feed(HostConnected{"h1"});
  auto actions = h.feed(HostConnected{"h2"});
  CHECK(of_type<StartGeneration>(actions).size() == 1);
}

TEST_CASE("health: the supervisor's moments are the agent protocol's") {
  CHECK(std::string(events::HostHealth::kStart) == proto::health_moment::kStart);
  CHECK(std::string(events::HostHealth::kJoin) == proto::health_moment::kJoin);
  CHECK(std::string(events::HostHealth::kAfterFailure) == proto::health_moment::kAfterFailure);
}
