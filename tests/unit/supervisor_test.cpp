// The supervisor driven by scripted events and a fake clock: no processes, no sleeps.

#include <doctest/doctest.h>

#include <algorithm>

#include "launcher/events/events.h"
#include "launcher/supervisor/failure_blame.h"
#include "launcher/supervisor/supervisor.h"

using namespace dtrain;
using namespace dtrain::supervisor;

namespace {

spec::JobSpec make_spec(int hosts, int slots) {
  spec::JobSpec spec;
  spec.name = "test";
  spec.slots_per_host = slots;
  for (int i = 0; i < hosts; ++i) {
    spec::HostEntry host;
    host.name = "h" + std::to_string(i + 1);
    host.slots = slots;
    spec.hosts.push_back(host);
  }
  spec.worker.command = {"train"};
  spec.stop_grace = Millis(2000);
  spec.heartbeat.interval = Millis(500);
  spec.heartbeat.timeout = Millis(5000);
  spec.heartbeat.hang_timeout = Millis(20000);
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

std::vector<std::string> event_names(const std::vector<Action>& actions) {
  std::vector<std::string> names;
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) names.push_back(event.event.value("ev", ""));
  return names;
}

std::vector<nlohmann::json> events_named(const std::vector<Action>& actions, const std::string& name) {
  std::vector<nlohmann::json> found;
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event.value("ev", "") == name) found.push_back(event.event);
  }
  return found;
}

bool has_event(const std::vector<Action>& actions, const std::string& name) {
  auto names = event_names(actions);
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// A supervisor plus its clock, connected and running generation 0.
struct Harness {
  explicit Harness(spec::JobSpec spec_in) : spec(std::move(spec_in)) {
    Result<plan::RankPlan> plan = plan::make_plan(spec);
    REQUIRE(plan.ok());
    supervisor = std::make_unique<Supervisor>(spec, *plan, clock);
  }
  std::vector<Action> feed(const Event& event) { return supervisor->on_event(event); }
  std::vector<Action> connect_all() {
    std::vector<Action> all;
    for (const spec::HostEntry& host : spec.hosts) {
      auto actions = feed(HostConnected{host.name});
      all.insert(all.end(), actions.begin(), actions.end());
    }
    return all;
  }
  /// Connects every host and starts every rank of generation 0.
  void run_generation_0() {
    connect_all();
    start_all(0);
  }
  void start_all(int gen) {
    for (int rank = 0; rank < supervisor->current_plan().world_size; ++rank) {
      feed(WorkerStarted{gen, rank, 1000 + rank});
    }
  }
  std::vector<Action> release_all(int gen) {
    std::vector<Action> all;
    // Names copied first: a release can start the next generation, which replaces the plan.
    std::vector<std::string> hosts;
    for (const plan::PlanHost& host : supervisor->current_plan().hosts) hosts.push_back(host.entry.name);
    for (const std::string& host : hosts) {
      auto actions = feed(GenerationReleased{gen, host});
      all.insert(all.end(), actions.begin(), actions.end());
    }
    return all;
  }
  WorkerExited exit_code(int gen, int rank, int code) {
    WorkerExited exited;
    exited.gen = gen;
    exited.rank = rank;
    exited.pid = 1000 + rank;
    exited.code = code;
    exited.observed_ms = clock.wall_ms();
    return exited;
  }
  spec::JobSpec spec;
  FakeClock clock;
  std::unique_ptr<Supervisor> supervisor;
};

}  // namespace

/// `exit` as killed by SIGTERM (no exit code), seen at `observed_ms` by its agent.
WorkerExited sigterm_of(WorkerExited exit, int64_t observed_ms) {
  exit.code.reset();
  exit.signal = "SIGTERM";
  exit.observed_ms = observed_ms;
  return exit;
}

TEST_CASE("a clean run: connect, start, every worker exits 0, release, succeed") {
  Harness h(make_spec(1, 2));
  CHECK(h.supervisor->state() == RunState::connecting);
  auto actions = h.connect_all();
  auto starts = of_type<StartGeneration>(actions);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].gen == 0);
  CHECK(starts[0].resume_step == -1);
  CHECK(h.supervisor->state() == RunState::launching);
  h.start_all(0);
  CHECK(h.supervisor->state() == RunState::running);
  CHECK(of_type<StopGeneration>(h.feed(h.exit_code(0, 0, 0))).empty());
  auto stops = of_type<StopGeneration>(h.feed(h.exit_code(0, 1, 0)));
  REQUIRE(stops.size() == 1);  // sweep stray descendants even after success
  CHECK(h.supervisor->state() == RunState::stopping);
  auto finish = of_type<FinishRun>(h.release_all(0));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::succeeded);
  CHECK(finish[0].exit_code == ExitCode::ok);
}

TEST_CASE("without elastic settings the first failing worker fails the run with its root cause") {
  Harness h(make_spec(1, 4));
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(h.exit_code(0, 2, 3));
  CHECK(has_event(actions, "failure.detected"));
  CHECK(has_event(actions, "failure.budget_exhausted"));
  auto stops = of_type<StopGeneration>(actions);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].grace_ms == 2000);
  // The others die of the stop: consequences, not causes.
  WorkerExited killed = h.exit_code(0, 0, 0);
  killed.code.reset();
  killed.signal = "SIGTERM";
  h.feed(killed);
  auto finish = of_type<FinishRun>(h.release_all(0));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::job_failed);
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->rank == 2);
  CHECK(h.supervisor->root_cause()->code == 3);
  CHECK(h.supervisor->root_cause()->detail == "exit code 3");
  CHECK(h.supervisor->ranks()[0].state == RankState::killed);
  CHECK(h.supervisor->ranks()[2].state == RankState::failed);
}

TEST_CASE("an exit the agent's kill caused is never the root cause, whatever its time stamp") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.start_all(0);
  h.clock.advance_ms(1000);
  WorkerExited crash = h.exit_code(0, 1, 7);
  WorkerExited terminated = sigterm_of(h.exit_code(0, 0, 0), crash.observed_ms - 300);  // a skewed agent clock
  terminated.killed_by_agent = true;
  h.feed(crash);
  h.clock.advance_ms(5);
  auto actions = h.feed(terminated);
  CHECK(!has_event(actions, "failure.root_cause"));
  CHECK(h.supervisor->root_cause()->rank == 1);
  CHECK(h.supervisor->root_cause()->code == 7);
}

TEST_CASE("the root cause is the first failure by time, even when reported second") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.start_all(0);
  h.clock.advance_ms(1000);
  WorkerExited later = h.exit_code(0, 1, 1);     // reported first, happened at t
  WorkerExited earlier = h.exit_code(0, 0, 0);   // happened 300 ms before, on a slower link
  earlier.code.reset();
  earlier.signal = "SIGKILL";
  earlier.observed_ms = later.observed_ms - 300;
  h.feed(later);
  CHECK(h.supervisor->root_cause()->rank == 1);
  h.clock.advance_ms(5);
  auto actions = h.feed(earlier);
  CHECK(has_event(actions, "failure.root_cause"));
  CHECK(h.supervisor->root_cause()->rank == 0);
  CHECK(h.supervisor->root_cause()->signal == "SIGKILL");
}

TEST_CASE("a rank that blames a lost peer yields the root cause to the peer that failed on its own") {
  Harness h(make_spec(1, 3));
  h.run_generation_0();
  h.clock.advance_ms(1000);
  // Rank 1 is reaped first: rank 0 closed its sockets before it was a zombie.
  WorkerExited consequence = h.exit_code(0, 1, 1);
  consequence.last_output = {"step 60 loss 1.0681",
                             "dtrain-train: rank 1: step 61: gloo allreduce failed on rank 1 of 2: peer rank 0 is gone "
                             "(crashed or killed?): Connection closed by peer [127.0.0.1]:42383"};
  auto first = h.feed(consequence);
  CHECK(has_event(first, "failure.detected"));
  CHECK(h.supervisor->root_cause()->rank == 1);
  h.clock.advance_ms(3);
  WorkerExited own = h.exit_code(0, 0, 1);  // later by its time stamp too
  own.last_output = {"step 60 loss 1.0681", "dtrain-train: rank 0: checkpoint step 60: write: No space left on device"};
  auto actions = h.feed(own);
  REQUIRE(has_event(actions, "failure.root_cause"));
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event.value("ev", "") != "failure.root_cause") continue;
    Result<events::FailureRootCause> said = events::FailureRootCause::from_json(event.event);
    REQUIRE(said.ok());
    CHECK(said->rank == 0);
    CHECK(said->detail == "rank 0 failed on its own (exit code 1); rank 1, reported first, names a lost peer");
  }
  CHECK(h.supervisor->root_cause()->rank == 0);
  // A third rank that also lost its peer, or one our stop killed, changes nothing now.
  WorkerExited third = h.exit_code(0, 2, 1);
  third.last_output = {"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer"};
  CHECK(!has_event(h.feed(third), "failure.root_cause"));
  CHECK(h.supervisor->root_cause()->rank == 0);
}

TEST_CASE("after a rank that blames a lost peer, neither another such rank nor one our stop killed is blamed") {
  Harness h(make_spec(1, 3));
  h.run_generation_0();
  h.clock.advance_ms(1000);
  WorkerExited consequence = h.exit_code(0, 1, 1);
  consequence.last_output = {"NCCL error: remote process exited or there was a network error"};
  h.feed(consequence);
  h.clock.advance_ms(3);
  WorkerExited also_lost = h.exit_code(0, 2, 1);
  also_lost.last_output = {"torch.distributed.DistBackendError: NCCL communicator was aborted on rank 2"};
  CHECK(!has_event(h.feed(also_lost), "failure.root_cause"));
  WorkerExited terminated = sigterm_of(h.exit_code(0, 0, 0), h.clock.wall_ms());
  terminated.killed_by_agent = true;
  CHECK(!has_event(h.feed(terminated), "failure.root_cause"));
  CHECK(h.supervisor->root_cause()->rank == 1);
}

TEST_CASE("reads_as_lost_peer: the phrases of dtrain-train, Gloo, NCCL and torch, in the last five lines only") {
  CHECK(reads_as_lost_peer({"peer rank 3 is gone (crashed or killed?): x"}, ""));
  CHECK(reads_as_lost_peer({"[pair.cc:598] CONNECTION CLOSED BY PEER [10.0.0.2]:1"}, ""));
  CHECK(reads_as_lost_peer({}, "DistBackendError: NCCL error: remote process exited or there was a network error"));
  CHECK_FALSE(reads_as_lost_peer({"OSError: [Errno 28] No space left on device"}, "exit code 1"));
  CHECK_FALSE(reads_as_lost_peer({}, ""));
  // A reset connection long before the failure is history, not the reason.
  CHECK_FALSE(reads_as_lost_peer({"warning: Connection reset by peer, retrying", "step 1", "step 2", "step 3", "step 4",
                                  "ValueError: bad batch"},
                                 "exit code 1"));
}

TEST_CASE("a stop request ends the run as stopped with exit code 130") {
  Harness h(make_spec(1, 2));
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(StopRequested{"received SIGINT"});
  CHECK(of_type<StopGeneration>(actions).size() == 1);
  auto finish = of_type<FinishRun>(h.release_all(0));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::stopped);
  CHECK(finish[0].exit_code == ExitCode::interrupted);
}

TEST_CASE("a preemption's stop ends the run as preempted with exit code 6 and its own worker grace") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.stop_grace = Millis(2'000);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(StopRequested{"received SIGTERM (preemption): nothing to save", true, 45'000});
  auto stops = of_type<StopGeneration>(actions);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].grace_ms == 45'000);
  auto finish = of_type<FinishRun>(h.release_all(0));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::preempted);
  CHECK(finish[0].exit_code == ExitCode::preempted);
  CHECK(h.supervisor->stop_reason() == "received SIGTERM (preemption): nothing to save");
  CHECK(std::string(to_string(RunState::preempted)) == "preempted");
  CHECK(is_terminal(RunState::preempted));
}

TEST_CASE("a preemption's stop without its own grace uses stop_grace") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.stop_grace = Millis(2'000);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  auto stops = of_type<StopGeneration>(h.feed(StopRequested{"dtrain stop --checkpoint: saved", true, 0}));
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].grace_ms == 2'000);
}

TEST_CASE("a stop request before any generation finishes at once") {
  Harness h(make_spec(2, 1));
  h.feed(HostConnected{"h1"});
  auto finish = of_type<FinishRun>(h.feed(StopRequested{"dtrain stop"}));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::interrupted);
}

TEST_CASE("with max_restarts a failure restarts in place from the newest checkpoint") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.elastic.max_restarts = 2;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 10, {}});
  h.feed(CheckpointCommitted{0, 20});
  h.feed(WorkerProgress{0, 0, 27, {}});
  auto actions = h.feed(h.exit_code(0, 1, 1));
  CHECK(has_event(actions, "recovery.started"));
  CHECK(h.supervisor->state() == RunState::recovering);
  auto starts = of_type<StartGeneration>(h.release_all(0));
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].gen == 1);
  CHECK(starts[0].resume_step == 20);
  CHECK(starts[0].restart_count == 1);
  h.start_all(1);
  h.clock.advance_ms(400);
  auto completed = h.feed(WorkerProgress{1, 0, 21, {}});
  REQUIRE(has_event(completed, "recovery.completed"));
  REQUIRE(h.supervisor->last_recovery());
  const events::RecoveryCompleted& recovery = h.supervisor->last_recovery()->completed;
  CHECK(h.supervisor->last_recovery()->gen == 1);
  CHECK(recovery.steps_lost == 7);
  CHECK(recovery.phases["first_step_ms"] == 400);
  CHECK(recovery.resume_step == 20);
}

TEST_CASE("restarts are bounded by max_restarts") {
  spec::JobSpec spec = make_spec(1, 1);
  spec.elastic.max_restarts = 1;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 5, {}});
  h.feed(h.exit_code(0, 0, 1));
  REQUIRE(of_type<StartGeneration>(h.release_all(0)).size() == 1);
  h.start_all(1);
  h.feed(WorkerProgress{1, 0, 9, {}});
  auto actions = h.feed(h.exit_code(1, 0, 1));
  CHECK(has_event(actions, "failure.budget_exhausted"));
  auto finish = of_type<FinishRun>(h.release_all(1));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::job_failed);
}

TEST_CASE("three generations without progress end the run as a crash loop") {
  spec::JobSpec spec = make_spec(1, 1);
  spec.elastic.max_restarts = 10;
  Harness h(spec);
  h.connect_all();
  std::vector<FinishRun> finish;
  for (int gen = 0; gen < 5 && finish.empty(); ++gen) {
    h.start_all(gen);
    h.feed(h.exit_code(gen, 0, 1));
    finish = of_type<FinishRun>(h.release_all(gen));
  }
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::crash_loop);
  CHECK(h.supervisor->generation() == 2);
}

TEST_CASE("a worker whose step stops advancing for hang_timeout is a failure") {
  Harness h(make_spec(1, 2));
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 1, {}});
  h.feed(WorkerProgress{0, 1, 1, {}});
  h.clock.advance_ms(15000);
  h.feed(WorkerProgress{0, 0, 2, {}});
  CHECK(of_type<StopGeneration>(h.feed(Tick{})).empty());
  h.clock.advance_ms(5001);  // rank 1 silent for 20.001 s
  auto actions = h.feed(Tick{});
  CHECK(has_event(actions, "worker.hang"));
  auto samples = of_type<CaptureSample>(actions);
  REQUIRE(samples.size() == 1);
  CHECK(samples[0].rank == 1);
  CHECK(samples[0].pid == 1001);
  CHECK(of_type<StopGeneration>(actions).size() == 1);
  CHECK(h.supervisor->root_cause()->kind == FailureKind::worker_hang);
  CHECK(h.supervisor->root_cause()->rank == 1);
}

TEST_CASE("workers that never beat are exempt from hang detection") {
  Harness h(make_spec(1, 1));
  h.connect_all();
  h.start_all(0);
  h.clock.advance_ms(100000);
  CHECK(of_type<StopGeneration>(h.feed(Tick{})).empty());
}

TEST_CASE("a lost host without elastic.min_hosts fails the run") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(HostLost{"h2", "nothing received for 5s"});
  CHECK(has_event(actions, "host.lost"));
  CHECK(has_event(actions, "failure.unrecoverable"));
  auto stops = of_type<StopGeneration>(actions);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].hosts == std::vector<std::string>{"h1"});
  auto finish = of_type<FinishRun>(h.release_all(0));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::hosts_lost);
}

TEST_CASE("hosts lost while the others connect are planned out once, when the rest have connected") {
  spec::JobSpec spec = make_spec(6, 1);
  spec.elastic.min_hosts = 2;
  Harness h(spec);
  std::vector<Action> all;
  auto take = [&](std::vector<Action> actions) { all.insert(all.end(), actions.begin(), actions.end()); };
  take(h.feed(HostConnected{"h1"}));
  take(h.feed(HostLost{"h2", "socketpair: Too many open files"}));
  take(h.feed(HostLost{"h3", "socketpair: Too many open files"}));
  take(h.feed(HostConnected{"h4"}));
  take(h.feed(HostLost{"h5", "socketpair: Too many open files"}));
  CHECK(events_named(all, "host.lost").size() == 3);
  CHECK(events_named(all, "plan.changed").empty());  // h6 has not answered yet
  CHECK(of_type<StartGeneration>(all).empty());
  take(h.feed(HostConnected{"h6"}));
  auto changed = events_named(all, "plan.changed");
  REQUIRE(changed.size() == 1);
  CHECK(changed[0]["without"] == nlohmann::json::array({"h2", "h3", "h5"}));
  auto starts = of_type<StartGeneration>(all);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].plan.world_size == 3);
  CHECK(h.supervisor->restarts() == 0);
}

TEST_CASE("hosts lost while connecting below elastic.min_hosts end the run at once, naming the last loss") {
  spec::JobSpec spec = make_spec(4, 1);
  spec.elastic.min_hosts = 3;
  Harness h(spec);
  h.feed(HostConnected{"h1"});
  auto first = h.feed(HostLost{"h2", "channel closed"});
  CHECK(of_type<FinishRun>(first).empty());
  auto second = h.feed(HostLost{"h3", "connection refused"});
  auto finish = of_type<FinishRun>(second);
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::infra);
  CHECK(h.supervisor->give_up_reason().find("h2") != std::string::npos);
  CHECK(events_named(second, "failure.detected").at(0).dump().find("connection refused") != std::string::npos);
}

TEST_CASE("a lost host with elastic.min_hosts shrinks without using the restart budget") {
  spec::JobSpec spec = make_spec(3, 1);
  spec.elastic.min_hosts = 2;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(HostLost{"h3", "channel closed"});
  CHECK(has_event(actions, "recovery.started"));
  auto starts = of_type<StartGeneration>(h.release_all(0));
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].plan.world_size == 2);
  CHECK(h.supervisor->restarts() == 0);
  CHECK(h.supervisor->excluded_hosts().count("h3") == 1);
}

TEST_CASE("hosts excluded while the failed generation stops change the decided plan: lost, or silent past the stop deadline") {
  spec::JobSpec spec = make_spec(3, 1);
  spec.elastic.min_hosts = 1;
  spec.elastic.max_restarts = 3;
  Harness h(spec);
  h.run_generation_0();
  auto crash = h.feed(h.exit_code(0, 0, 1));  // decided: a restart on h1, h2, h3
  REQUIRE(of_type<StopGeneration>(crash).size() == 1);
  CHECK(h.supervisor->phase() == Supervisor::Phase::recovering);
  h.feed(GenerationReleased{0, "h1"});
  auto lost = h.feed(HostLost{"h3", "channel closed"});  // while stopping: no new decision, a new plan
  CHECK(!has_event(lost, "recovery.started"));
  h.clock.advance_ms(2000 + 5000 + 1);  // h2 never confirms
  auto actions = h.feed(Tick{});
  CHECK(has_event(actions, "resources.unconfirmed"));
  auto changed = events_named(actions, "plan.changed");
  REQUIRE(changed.size() == 1);
  CHECK(changed[0]["without"] == nlohmann::json::array({"h2", "h3"}));
  auto starts = of_type<StartGeneration>(actions);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].plan.world_size == 1);
  CHECK(starts[0].plan.ranks[0].host == "h1");
  CHECK(h.supervisor->restarts() == 1);

  // Without a plan left, the recovery ends the run instead (hosts_lost).
  spec::JobSpec strict = make_spec(2, 1);
  strict.elastic.max_restarts = 3;
  Harness s(strict);
  s.run_generation_0();
  s.feed(s.exit_code(0, 0, 1));
  s.feed(GenerationReleased{0, "h1"});
  auto ended = s.feed(HostLost{"h2", "channel closed"});
  CHECK(has_event(ended, "failure.unrecoverable"));
  auto finish = of_type<FinishRun>(ended);
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::hosts_lost);
  CHECK(of_type<StartGeneration>(ended).empty());
}

TEST_CASE("hosts that never confirm release are given up after stop_grace + heartbeat.timeout") {
  Harness h(make_spec(1, 1));
  h.connect_all();
  h.start_all(0);
  h.feed(StopRequested{"test"});
  h.clock.advance_ms(2000 + 5000 - 1);
  CHECK(of_type<FinishRun>(h.feed(Tick{})).empty());
  h.clock.advance_ms(2);
  auto actions = h.feed(Tick{});
  CHECK(has_event(actions, "resources.unconfirmed"));
  CHECK(of_type<FinishRun>(actions).size() == 1);
}

TEST_CASE("a host that cannot be reached at start fails the run with an infrastructure exit code") {
  Harness h(make_spec(2, 1));
  h.feed(HostConnected{"h1"});
  auto finish = of_type<FinishRun>(h.feed(HostLost{"h2", "connect timed out"}));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::infra);
  CHECK(h.supervisor->state() == RunState::failed);
  CHECK(h.supervisor->root_cause()->kind == FailureKind::host_lost);
}

TEST_CASE("events of an older generation are ignored") {
  spec::JobSpec spec = make_spec(1, 1);
  spec.elastic.max_restarts = 3;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(h.exit_code(0, 0, 1));
  h.release_all(0);
  h.start_all(1);
  auto actions = h.feed(h.exit_code(0, 0, 9));  // stale
  CHECK(actions.empty());
  CHECK(h.supervisor->state() == RunState::running);
}

TEST_CASE("when every rank stalls, the one that stopped first is blamed for the hang") {
  Harness h(make_spec(1, 3));
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 1, 40, {}});   // rank 1 stopped reporting at step 40
  h.clock.advance_ms(300);
  h.feed(WorkerProgress{0, 0, 41, {}});   // its peers got one step further, then blocked
  h.feed(WorkerProgress{0, 2, 41, {}});
  h.clock.advance_ms(21000);
  auto actions = h.feed(Tick{});
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->kind == FailureKind::worker_hang);
  CHECK(h.supervisor->root_cause()->rank == 1);
}

TEST_CASE("a rank the agent saw stopped is blamed for a hang before ranks at a lower step") {
  Harness h(make_spec(1, 2));
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 40, {}});
  h.feed(WorkerProgress{0, 1, 45, {}});  // its last beat went out just before SIGSTOP
  h.feed(WorkerStoppedSeen{0, 1});
  h.clock.advance_ms(21000);
  h.feed(Tick{});
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->rank == 1);
}

TEST_CASE("a stopped rank whose last beat came just after its blocked peer's is blamed, not the peer") {
  Harness h(make_spec(1, 2));
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 34, {}});
  h.clock.advance_ms(150);
  h.feed(WorkerProgress{0, 1, 34, {}});  // rank 1's beat of the same step came 150 ms later,
  h.feed(WorkerStoppedSeen{0, 1});       // then it was stopped and rank 0 blocked on it
  h.clock.advance_ms(19900);             // rank 0 is past hang_timeout (20 s); rank 1 not quite
  h.feed(Tick{});
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->rank == 1);
}

TEST_CASE("a rank in a checkpoint save gets heartbeat.checkpoint_timeout, and its waiting peers are not hung") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.heartbeat.checkpoint_timeout = Millis(60000);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 20, true});  // rank 0 starts saving at step 20
  h.feed(WorkerProgress{0, 1, 20, {}});        // rank 1 goes on and blocks in the next collective
  h.clock.advance_ms(50000);               // far past hang_timeout (20 s), within 60 s
  h.feed(Tick{});
  CHECK_FALSE(h.supervisor->root_cause());
  h.feed(WorkerProgress{0, 0, 20, false});  // the save ends
  h.clock.advance_ms(15000);                // both ranks' clocks restarted at the end of the save
  h.feed(Tick{});
  CHECK_FALSE(h.supervisor->root_cause());
  h.feed(WorkerProgress{0, 0, 21, {}});
  h.feed(WorkerProgress{0, 1, 21, {}});
  CHECK(h.supervisor->state() == RunState::running);
}

TEST_CASE("a checkpoint save longer than heartbeat.checkpoint_timeout is a hang of the saving rank") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.heartbeat.checkpoint_timeout = Millis(60000);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 1, 20, {}});
  h.feed(WorkerProgress{0, 0, 20, true});
  h.clock.advance_ms(61000);
  auto actions = h.feed(Tick{});
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->kind == FailureKind::worker_hang);
  CHECK(h.supervisor->root_cause()->rank == 0);
  CHECK(h.supervisor->root_cause()->detail.find("checkpoint save at step 20") != std::string::npos);
  CHECK(h.supervisor->root_cause()->detail.find("heartbeat.checkpoint_timeout") != std::string::npos);
  bool phase_recorded = false;
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event.value("ev", "") == "worker.hang") phase_recorded = event.event.value("phase", "") == "checkpoint";
  }
  CHECK(phase_recorded);
}

TEST_CASE("a rank stopped in the middle of a save is hung after hang_timeout, not checkpoint_timeout") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.heartbeat.checkpoint_timeout = Millis(600000);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 1, 20, {}});
  h.feed(WorkerProgress{0, 0, 20, true});
  h.feed(WorkerStoppedSeen{0, 0});
  h.clock.advance_ms(21000);
  h.feed(Tick{});
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->rank == 0);
  CHECK(h.supervisor->root_cause()->detail.find("no step progress") != std::string::npos);
}

TEST_CASE("heartbeat.checkpoint_timeout defaults to 10 minutes, or hang_timeout when longer") {
  spec::HeartbeatSettings heartbeat;
  CHECK(heartbeat.checkpoint_hang_timeout() == Millis(600000));
  heartbeat.hang_timeout = Millis(900000);
  CHECK(heartbeat.checkpoint_hang_timeout() == Millis(900000));
  heartbeat.checkpoint_timeout = Millis(1200000);
  CHECK(heartbeat.checkpoint_hang_timeout() == Millis(1200000));
}

TEST_CASE("fewer hosts than elastic.min_hosts: the run fails with exit 5 and says why") {
  spec::JobSpec spec = make_spec(2, 1);
  spec.elastic.min_hosts = 2;
  spec.elastic.max_restarts = 3;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(HostLost{"h2", "channel closed"});
  auto actions = h.release_all(0);
  auto finish = of_type<FinishRun>(actions);
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::hosts_lost);
  CHECK(h.supervisor->give_up_reason().find("elastic.min_hosts=2") != std::string::npos);
  bool explained = false;
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event.value("ev", "") == "run.state" && event.event.value("state", "") == "failed") {
      explained = event.event.value("why", "").find("elastic.min_hosts=2") != std::string::npos;
    }
  }
  CHECK(explained);
}

TEST_CASE("a host lost to silence records how long it was silent as the detection latency") {
  spec::JobSpec spec = make_spec(3, 1);
  spec.elastic.min_hosts = 2;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(HostLost{"h2", "nothing received for 5.1s", 5100});
  bool lost_has_silence = false;
  bool detected_latency = false;
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event.value("ev", "") == "host.lost") lost_has_silence = event.event.value("silent_ms", -1) == 5100;
    if (event.event.value("ev", "") == "failure.detected") detected_latency = event.event.value("latency_ms", -1) == 5100;
  }
  CHECK(lost_has_silence);
  CHECK(detected_latency);
}

TEST_CASE("steps lost count a committed checkpoint newer than the last beat") {
  spec::JobSpec spec = make_spec(3, 1);
  spec.elastic.min_hosts = 2;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  for (int rank = 0; rank < 3; ++rank) h.feed(WorkerProgress{0, rank, 143, {}});
  h.feed(CheckpointCommitted{0, 150});
  h.feed(HostLost{"h3", "channel closed"});
  h.release_all(0);
  h.start_all(1);
  std::vector<Action> actions;
  for (int rank = 0; rank < 2; ++rank) {
    auto more = h.feed(WorkerProgress{1, rank, 151, {}});
    actions.insert(actions.end(), more.begin(), more.end());
  }
  bool found = false;
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event.value("ev", "") != "recovery.completed") continue;
    found = true;
    CHECK(event.event["resume_step"] == 150);
    CHECK(event.event["last_step"] == 150);
    CHECK(event.event["steps_lost"] == 0);
  }
  CHECK(found);
}

TEST_CASE("an exit within the clock uncertainty of the stop is a consequence, not the root cause") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.start_all(0);
  h.clock.advance_ms(1000);
  WorkerExited first = h.exit_code(0, 1, 3);
  h.feed(first);
  REQUIRE(h.supervisor->root_cause()->rank == 1);
  // Killed by our own stop; its host's clock offset is known only to ±40 ms, so a stamp 20 ms
  // before the stop proves nothing.
  h.clock.advance_ms(5);
  WorkerExited killed = sigterm_of(h.exit_code(0, 0, 0), first.observed_ms - 20);
  killed.observed_uncertainty_ms = 40;
  auto actions = h.feed(killed);
  CHECK(!has_event(actions, "failure.root_cause"));
  CHECK(h.supervisor->root_cause()->rank == 1);
}

TEST_CASE("resume_from: generations go on, workers resume from the newest checkpoint, supervisor.lost recovery") {
  Harness h(make_spec(2, 2));
  ResumeFrom from;
  from.last_generation = 3;
  from.committed_steps = {50, 100};
  from.last_step = 130;
  from.restarts = 1;
  from.previous_pid = 4242;
  from.previous_host = "login1";
  from.last_seen_wall_ms = h.clock.wall_ms() - 9000;
  from.waited_ms = 4000;
  auto resumed = h.supervisor->resume_from(from);
  auto detected = of_type<RecordEvent>(resumed);
  REQUIRE(detected.size() == 2);
  CHECK(detected[0].event["ev"] == "failure.detected");
  CHECK(detected[0].event["kind"] == "supervisor.lost");
  CHECK(detected[0].event["pid"] == 4242);
  CHECK(h.supervisor->restarts() == 1);

  auto started = of_type<StartGeneration>(h.connect_all());
  REQUIRE(started.size() == 1);
  CHECK(started[0].gen == 4);
  CHECK(started[0].resume_step == 100);
  h.start_all(4);
  h.clock.advance_ms(700);
  CHECK(!has_event(h.feed(WorkerProgress{4, 0, 100, {}}), "recovery.completed"));
  auto progress = h.feed(WorkerProgress{4, 0, 101, {}});
  REQUIRE(has_event(progress, "recovery.completed"));
  REQUIRE(h.supervisor->last_recovery());
  const events::RecoveryCompleted& completed = h.supervisor->last_recovery()->completed;
  CHECK(completed.kind == events::FailureKind::supervisor_lost);
  CHECK(completed.resume_step == 100);
  CHECK(completed.steps_lost == 30);
  CHECK(completed.phases["stop_ms"] == 4000);
  CHECK(completed.phases["detect_ms"] == 5000);
  CHECK(completed.phases["first_step_ms"] == 700);
}

TEST_CASE("resume_from a stopped run continues it without inventing a failure") {
  Harness h(make_spec(1, 2));
  ResumeFrom from;
  from.supervisor_lost = false;
  from.last_generation = 0;
  from.committed_steps = {20};
  CHECK(h.supervisor->resume_from(from).empty());
  auto started = of_type<StartGeneration>(h.connect_all());
  REQUIRE(started.size() == 1);
  CHECK(started[0].gen == 1);
  CHECK(started[0].resume_step == 20);
  CHECK(h.supervisor->incidents().empty());
}

/// Generation 0 of ranks 0 and 1 reaches step 10 (checkpointed), rank 1 is SIGKILLed, and
/// generation 1 has started every rank 300 ms ago: a restart waiting for its rendezvous.
void restart_after_rank_1_killed(Harness& h) {
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 10, {}});
  h.feed(WorkerProgress{0, 1, 10, {}});
  h.feed(CheckpointCommitted{0, 10});
  WorkerExited killed = h.exit_code(0, 1, 0);
  killed.code = std::nullopt;
  killed.signal = "SIGKILL";
  h.feed(killed);
  h.clock.advance_ms(100);
  h.release_all(0);
  h.clock.advance_ms(50);
  h.start_all(1);
  h.clock.advance_ms(300);
}

TEST_CASE("recovery phases include rendezvous when every rank reports comm.ready") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.elastic.max_restarts = 1;
  Harness h(spec);
  restart_after_rank_1_killed(h);
  h.feed(WorkerCommReady{1, 0});
  CHECK(!has_event(h.feed(WorkerCommReady{1, 0}), "comm.ready"));  // a repeat counts once
  h.clock.advance_ms(200);
  CHECK(has_event(h.feed(WorkerCommReady{1, 1}), "comm.ready"));
  h.clock.advance_ms(40);
  REQUIRE(has_event(h.feed(WorkerProgress{1, 0, 11, {}}), "recovery.completed"));
  REQUIRE(h.supervisor->last_recovery());
  const nlohmann::json& phases = h.supervisor->last_recovery()->completed.phases;
  CHECK(phases["rendezvous_ms"] == 500);
  CHECK(phases["first_step_ms"] == 40);
}

TEST_CASE("a first step that arrives before another host's comm.ready completes the recovery when that comm.ready does") {
  // Frames of different hosts come through different links: under load rank 0's first step can
  // be read before rank 1's comm.ready, which rank 1 sent before that step could happen.
  spec::JobSpec spec = make_spec(2, 1);
  spec.elastic.max_restarts = 1;
  Harness h(spec);
  restart_after_rank_1_killed(h);
  h.feed(WorkerCommReady{1, 0});
  h.clock.advance_ms(200);
  CHECK(!has_event(h.feed(WorkerProgress{1, 0, 11, {}}), "recovery.completed"));  // rank 1's comm.ready is due
  h.clock.advance_ms(30);
  REQUIRE(has_event(h.feed(WorkerCommReady{1, 1}), "recovery.completed"));
  REQUIRE(h.supervisor->last_recovery());
  const nlohmann::json& phases = h.supervisor->last_recovery()->completed.phases;
  CHECK(phases["rendezvous_ms"] == 500);  // ended by the first step at the latest
  CHECK(phases["first_step_ms"] == 0);
  CHECK(h.supervisor->last_recovery()->completed.resume_step == 10);
}

TEST_CASE("ranks that never beat are exempt from hang detection, and the run log says so once") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.heartbeat.hang_timeout = Millis(3000);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 5, {}});  // rank 0 speaks the protocol, rank 1 never does
  h.clock.advance_ms(2000);
  CHECK(!has_event(h.feed(Tick{}), "hang_detection.off"));
  h.feed(WorkerProgress{0, 0, 6, {}});
  h.clock.advance_ms(1500);
  auto actions = h.feed(Tick{});
  REQUIRE(has_event(actions, "hang_detection.off"));
  for (const RecordEvent& event : of_type<RecordEvent>(actions)) {
    if (event.event["ev"] == "hang_detection.off") CHECK(event.event["ranks"] == nlohmann::json::array({1}));
  }
  h.clock.advance_ms(100);
  CHECK(!has_event(h.feed(Tick{}), "hang_detection.off"));
  h.clock.advance_ms(60000);  // rank 1 silent for a minute: not a hang, it has no step
  h.feed(WorkerProgress{0, 0, 7, {}});
  auto later = h.feed(Tick{});
  CHECK(!has_event(later, "worker.hang"));
  CHECK(!has_event(later, "hang_detection.on"));
  // A slow starter (an import longer than hang_timeout) beats at last: it is watched from now on.
  h.feed(WorkerProgress{0, 1, 1, {}});
  auto watched = h.feed(Tick{});
  REQUIRE(has_event(watched, "hang_detection.on"));
  for (const RecordEvent& event : of_type<RecordEvent>(watched)) {
    if (event.event["ev"] == "hang_detection.on") CHECK(event.event["ranks"] == nlohmann::json::array({1}));
  }
  CHECK(!has_event(h.feed(Tick{}), "hang_detection.on"));  // said once
}

TEST_CASE("a script that reports no steps but runs longer than progress_window is not a crash loop") {
  // The scenario: a plain script killed three times, each time after training a while.
  spec::JobSpec spec = make_spec(1, 2);
  spec.elastic.max_restarts = 10;
  Harness h(spec);
  h.connect_all();
  for (int gen = 0; gen < 4; ++gen) {
    h.start_all(gen);
    h.clock.advance_ms(45000);  // > 2 × hang_timeout (40 s): the default progress_window
    h.feed(h.exit_code(gen, 1, 137));
    CHECK(of_type<FinishRun>(h.release_all(gen)).empty());
  }
  CHECK(h.supervisor->generation() == 4);
  // Every incident names its own generation.
  const auto& incidents = h.supervisor->incidents();
  REQUIRE(incidents.size() == 4);
  for (int gen = 0; gen < 4; ++gen) CHECK(incidents[static_cast<size_t>(gen)]["gen"] == gen);
}

TEST_CASE("crash_loop_after and progress_window decide when short generations without steps end the run") {
  spec::JobSpec spec = make_spec(1, 1);
  spec.elastic.max_restarts = 10;
  spec.elastic.crash_loop_after = 2;
  spec.elastic.progress_window = Millis(10000);
  Harness h(spec);
  h.connect_all();
  std::vector<Action> last;
  int gen = 0;
  for (; gen < 5; ++gen) {
    h.start_all(gen);
    h.clock.advance_ms(9000);  // shorter than the window: no progress can be seen
    h.feed(h.exit_code(gen, 0, 1));
    last = h.release_all(gen);
    if (!of_type<FinishRun>(last).empty()) break;
  }
  CHECK(gen == 1);
  auto finish = of_type<FinishRun>(last);
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::crash_loop);
  CHECK(h.supervisor->give_up_reason().find("no progress across 2 consecutive generations") != std::string::npos);
  CHECK(h.supervisor->give_up_reason().find("elastic.crash_loop_after 2") != std::string::npos);
}

TEST_CASE("a newer committed checkpoint is progress even when no step was reported") {
  spec::JobSpec spec = make_spec(1, 1);
  spec.elastic.max_restarts = 10;
  Harness h(spec);
  h.connect_all();
  for (int gen = 0; gen < 4; ++gen) {
    h.start_all(gen);
    h.feed(CheckpointCommitted{gen, 10 * (gen + 1)});
    h.feed(h.exit_code(gen, 0, 1));
    CHECK(of_type<FinishRun>(h.release_all(gen)).empty());
  }
}

TEST_CASE("reported steps that do not advance stay a crash loop, however long the generation ran") {
  spec::JobSpec spec = make_spec(1, 1);
  spec.elastic.max_restarts = 10;
  Harness h(spec);
  h.connect_all();
  std::vector<FinishRun> finish;
  for (int gen = 0; gen < 5 && finish.empty(); ++gen) {
    h.start_all(gen);
    if (gen == 0) h.feed(CheckpointCommitted{0, 5});
    h.feed(WorkerProgress{gen, 0, 5, {}});  // every later generation resumes at 5 and never gets past it
    h.clock.advance_ms(100000);
    h.feed(h.exit_code(gen, 0, 1));
    finish = of_type<FinishRun>(h.release_all(gen));
  }
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].exit_code == ExitCode::crash_loop);
}

TEST_CASE("exclude_after excludes a failing host even without min_hosts when an idle spare takes it") {
  spec::JobSpec spec = make_spec(2, 1);
  spec::HostEntry spare;
  spare.name = "spare1";
  spare.slots = 1;
  spec.spares.push_back(spare);
  spec.elastic.max_restarts = 10;
  spec.elastic.exclude_after = 2;
  Harness h(spec);
  h.connect_all();
  h.feed(HostConnected{"spare1"});
  for (int gen = 0; gen < 2; ++gen) {
    h.start_all(gen);
    h.clock.advance_ms(45000);
    auto actions = h.feed(h.exit_code(gen, 1, 1));  // rank 1 lives on h2
    CHECK(has_event(actions, "host.excluded") == (gen == 1));
    h.release_all(gen);
  }
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : h.supervisor->current_plan().hosts) hosts.push_back(host.entry.name);
  CHECK(hosts == std::vector<std::string>{"h1", "spare1"});
}

TEST_CASE("exclude_after without a spare or min_hosts restarts in place and says why it did not exclude") {
  spec::JobSpec spec = make_spec(2, 1);
  spec.elastic.max_restarts = 10;
  spec.elastic.exclude_after = 1;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  auto actions = h.feed(h.exit_code(0, 1, 1));
  CHECK_FALSE(has_event(actions, "host.excluded"));
  CHECK(has_event(actions, "host.exclusion_skipped"));
  h.release_all(0);
  CHECK(h.supervisor->generation() == 1);
  CHECK(h.supervisor->current_plan().hosts.size() == 2);
}

TEST_CASE("a job without restarts says so instead of 'restart budget spent'") {
  Harness h(make_spec(1, 1));
  h.connect_all();
  h.start_all(0);
  h.feed(h.exit_code(0, 0, 3));
  CHECK(h.supervisor->give_up_reason().rfind("no restarts allowed", 0) == 0);
}

// ---- launch deadlines: every launch step ends in a clear failure, never `launching` for ever ----

namespace {

const RecordEvent* find_event(const std::vector<Action>& actions, const std::string& name) {
  for (const Action& action : actions) {
    if (const RecordEvent* record = std::get_if<RecordEvent>(&action); record && record->event.value("ev", "") == name) {
      return record;
    }
  }
  return nullptr;
}

}  // namespace

TEST_CASE("launch deadline: no port reply from rank 0's host within 2 x heartbeat.timeout fails the generation") {
  spec::JobSpec spec = make_spec(2, 1);
  spec.elastic.max_restarts = 1;
  Harness h(spec);
  h.connect_all();
  REQUIRE(h.supervisor->state() == RunState::launching);
  h.clock.advance_ms(10000);  // exactly 2 x heartbeat.timeout: not yet
  CHECK(h.feed(Tick{}).empty());
  h.clock.advance_ms(1);
  auto actions = h.feed(Tick{});
  const RecordEvent* detected = find_event(actions, "failure.detected");
  REQUIRE(detected != nullptr);
  CHECK(detected->event["kind"] == "launch.timeout");
  CHECK(detected->event["host"] == "h1");
  CHECK(detected->event["gen"] == 0);
  std::string detail = detected->event["detail"];
  CHECK(detail.find("port reservation") != std::string::npos);
  CHECK(detail.find("heartbeat.timeout") != std::string::npos);
  // Budget left: a restart of the generation, not a run stuck in launching.
  CHECK(h.supervisor->state() == RunState::recovering);
  REQUIRE(of_type<StopGeneration>(actions).size() == 1);
  auto next = of_type<StartGeneration>(h.release_all(0));
  REQUIRE(next.size() == 1);
  CHECK(next[0].gen == 1);
  CHECK(h.supervisor->root_cause()->kind == FailureKind::launch_timeout);
}

TEST_CASE("launch deadline: ranks that never report started are named with their host, and the run fails without budget") {
  Harness h(make_spec(2, 2));
  h.connect_all();
  h.feed(GenerationSpawned{0});
  h.clock.advance_ms(6000);
  h.feed(WorkerStarted{0, 0, 1000});
  h.feed(WorkerStarted{0, 1, 1001});
  h.feed(WorkerStarted{0, 3, 1003});
  CHECK(h.feed(Tick{}).empty());
  h.clock.advance_ms(4001);  // 10001 ms after the spawn; the port wait before it does not count
  auto actions = h.feed(Tick{});
  const RecordEvent* detected = find_event(actions, "failure.detected");
  REQUIRE(detected != nullptr);
  CHECK(detected->event["kind"] == "launch.timeout");
  CHECK(detected->event["host"] == "h2");
  CHECK(detected->event["rank"] == 2);
  CHECK(detected->event["detail"] == "spawn → started: rank 2 on h2 not started within 10s (2 × heartbeat.timeout)");
  CHECK(h.supervisor->state() == RunState::stopping);  // max_restarts 0
  auto finish = of_type<FinishRun>(h.release_all(0));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::failed);
}

TEST_CASE("launch deadline: the port wait and the spawn wait each get their own deadline") {
  Harness h(make_spec(1, 1));
  h.connect_all();
  h.clock.advance_ms(9000);
  CHECK(h.feed(Tick{}).empty());
  h.feed(GenerationSpawned{0});
  h.clock.advance_ms(9000);  // 18 s since the start, 9 s since the spawn
  CHECK(h.feed(Tick{}).empty());
  h.start_all(0);
  CHECK(h.supervisor->state() == RunState::running);
  h.clock.advance_ms(60000);
  CHECK(!find_event(h.feed(Tick{}), "failure.detected"));
}

TEST_CASE("a port reservation the agent answers with an error ends the generation at once as agent.error") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  CHECK(h.feed(LaunchStepFailed{1, "h1", "port reservation", "stale"}).empty());  // another generation
  auto actions = h.feed(LaunchStepFailed{0, "h1", "port reservation", "cannot find a free TCP port: EADDRINUSE"});
  const RecordEvent* detected = find_event(actions, "failure.detected");
  REQUIRE(detected != nullptr);
  CHECK(detected->event["kind"] == "agent.error");
  CHECK(detected->event["host"] == "h1");
  CHECK(detected->event["detail"] ==
        "port reservation failed on h1: cannot find a free TCP port: EADDRINUSE");
  CHECK(h.supervisor->state() == RunState::stopping);
  CHECK(has_event(actions, "failure.budget_exhausted"));
}

// ---- in-place recovery (elastic.in_place): the survivors are carried over to the next
// generation instead of being stopped; only the failed rank is spawned anew; every way the
// attempt can fail falls back to a full restart.

namespace {

spec::JobSpec in_place_spec() {
  spec::JobSpec spec = make_spec(2, 2);
  spec.elastic.max_restarts = 3;
  spec.elastic.in_place = true;
  return spec;
}

/// Two hosts of two ranks running generation 0 at step 50; `all` keeps every action.
struct InPlaceHarness : Harness {
  explicit InPlaceHarness(spec::JobSpec spec_in) : Harness(std::move(spec_in)) {
    connect_all();
    start_all(0);
    REQUIRE(supervisor->state() == RunState::running);
    for (int rank = 0; rank < 4; ++rank) feed(WorkerProgress{0, rank, 50, std::nullopt});
  }
  std::vector<Action> feed(const Event& event) {
    std::vector<Action> actions = Harness::feed(event);
    all.insert(all.end(), actions.begin(), actions.end());
    return actions;
  }
  /// Rank 2 (on h2) crashes; returns the ContinueInPlace the supervisor asked for.
  ContinueInPlace crash_rank_2() {
    auto actions = feed(exit_code(0, 2, 1));
    CHECK(of_type<StopGeneration>(actions).empty());
    auto started = events_named(actions, "recovery.started");
    REQUIRE(started.size() == 1);
    CHECK(started[0]["action"] == "in-place");
    auto continued = of_type<ContinueInPlace>(actions);
    REQUIRE(continued.size() == 1);
    return continued[0];
  }
  void carry_over(int gen) {
    feed(SurvivorsCarriedOver{gen, "h1", {0, 1}, {1000, 1001}});
    feed(SurvivorsCarriedOver{gen, "h2", {3}, {1003}});
  }
  /// Rank 2 crashes, the survivors are carried over and its replacement starts: generation 1
  /// runs, its communicators not yet up.
  void rejoin_after_crash() {
    crash_rank_2();
    carry_over(1);
    feed(WorkerStarted{1, 2, 2002});
  }
  void all_comm_ready(int gen) {
    for (int rank = 0; rank < 4; ++rank) feed(WorkerCommReady{gen, rank});
  }
  std::vector<Action> all;
};

}  // namespace

TEST_CASE("a crashed rank is replaced in place: survivors carried over, recovery.completed in-place with 0 steps lost") {
  InPlaceHarness h(in_place_spec());
  ContinueInPlace continued = h.crash_rank_2();
  CHECK(continued.from_gen == 0);
  CHECK(continued.gen == 1);
  CHECK(continued.replaced == std::vector<int>{2});
  CHECK(continued.hosts == std::vector<std::string>{"h1", "h2"});
  CHECK(continued.restart_count == 1);
  CHECK(h.supervisor->generation() == 1);
  CHECK(h.supervisor->state() == RunState::launching);
  CHECK(h.supervisor->phase() == Supervisor::Phase::in_place_launching);
  CHECK(h.supervisor->restarts() == 1);
  CHECK(h.supervisor->ranks()[0].state == RankState::running);
  CHECK(h.supervisor->ranks()[0].pid == 1000);
  CHECK(h.supervisor->ranks()[2].state == RankState::starting);

  h.clock.advance_ms(20);
  h.carry_over(1);
  CHECK(events_named(h.all, "recovery.carried_over").size() == 2);
  h.feed(GenerationSpawned{1});
  h.clock.advance_ms(30);
  h.feed(WorkerStarted{1, 2, 2002});
  CHECK(h.supervisor->state() == RunState::running);
  CHECK(h.supervisor->phase() == Supervisor::Phase::in_place_running);
  // A survivor's old step, in flight when it was carried over, does not complete the recovery.
  h.feed(WorkerProgress{1, 0, 50, std::nullopt});
  CHECK(events_named(h.all, "recovery.completed").empty());
  h.clock.advance_ms(40);
  h.all_comm_ready(1);
  h.clock.advance_ms(10);
  auto actions = h.feed(WorkerProgress{1, 0, 51, std::nullopt});
  auto completed = events_named(actions, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "in-place");
  CHECK(h.supervisor->phase() == Supervisor::Phase::running);  // the in-place recovery is over
  CHECK(completed[0]["kind"] == "worker.exit");
  CHECK(completed[0]["steps_lost"] == 0);
  CHECK(completed[0]["resume_step"] == 50);
  CHECK(completed[0]["last_step"] == 50);
  CHECK_FALSE(completed[0].contains("fallback"));
  const nlohmann::json& phases = completed[0]["phases"];
  CHECK(phases["abort_ms"] == 20);
  CHECK(phases["spawn_ms"] == 50);
  CHECK(phases["rendezvous_ms"] == 40);
  CHECK(phases["state_and_first_step_ms"] == 10);
  CHECK(phases["total_ms"] == 100);
  CHECK_FALSE(phases.contains("stop_ms"));
  CHECK(of_type<StopGeneration>(h.all).empty());
  CHECK(of_type<StartGeneration>(h.all).empty());  // since generation 0: nobody was restarted
}

TEST_CASE("a hung rank is killed alone, and its exit starts the in-place recovery") {
  InPlaceHarness h(in_place_spec());
  for (int rank : {0, 1, 3}) h.feed(WorkerProgress{0, rank, 51, std::nullopt});
  h.clock.advance_ms(5000);
  for (int rank : {0, 1, 3}) h.feed(WorkerProgress{0, rank, 52, std::nullopt});
  h.clock.advance_ms(17000);  // rank 2 silent for 22 s > hang_timeout 20 s; the others for 17 s
  auto actions = h.feed(Tick{});
  REQUIRE(of_type<CaptureSample>(actions).size() == 1);
  auto kills = of_type<KillRanks>(actions);
  REQUIRE(kills.size() == 1);
  CHECK(kills[0].gen == 0);
  CHECK(kills[0].host == "h2");
  CHECK(kills[0].ranks == std::vector<int>{2});
  CHECK(of_type<StopGeneration>(actions).empty());
  CHECK(of_type<ContinueInPlace>(actions).empty());
  CHECK(h.supervisor->state() == RunState::recovering);
  CHECK(h.supervisor->phase() == Supervisor::Phase::in_place_killing);
  // An agent's partial release, if the driver passed one on, must not end anything.
  h.feed(GenerationReleased{0, "h2"});
  CHECK(h.supervisor->phase() == Supervisor::Phase::in_place_killing);

  h.clock.advance_ms(15);
  WorkerExited killed = h.exit_code(0, 2, 0);
  killed.code.reset();
  killed.signal = "SIGKILL";
  auto continued = of_type<ContinueInPlace>(h.feed(killed));
  REQUIRE(continued.size() == 1);
  CHECK(continued[0].replaced == std::vector<int>{2});
  h.carry_over(1);
  h.feed(WorkerStarted{1, 2, 2002});
  h.all_comm_ready(1);
  auto completed = events_named(h.feed(WorkerProgress{1, 1, 53, std::nullopt}), "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["kind"] == "worker.hang");
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["phases"]["kill_ms"] == 15);
  CHECK(completed[0]["steps_lost"] == 0);
}

TEST_CASE("a survivor one step ahead when its peer failed is rolled back, and that step is not counted as lost") {
  // Rank 0's all-reduce of step 51 finished, its peers' did not before rank 2 crashed: the
  // survivors agree on step 50 (rank 0 rolls back) and generation 1 starts with step 51.
  InPlaceHarness h(in_place_spec());
  h.feed(WorkerProgress{0, 0, 51, std::nullopt});
  h.rejoin_after_crash();
  h.all_comm_ready(1);
  auto completed = events_named(h.feed(WorkerProgress{1, 1, 51, std::nullopt}), "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["resume_step"] == 50);
  CHECK(completed[0]["last_step"] == 51);  // what rank 0 reported, kept as evidence
  CHECK(completed[0]["steps_lost"] == 0);
}

TEST_CASE("a survivor that ended before it was carried over makes the recovery fall back to a full restart") {
  InPlaceHarness h(in_place_spec());
  h.crash_rank_2();
  h.feed(SurvivorsCarriedOver{1, "h1", {0, 1}, {1000, 1001}});
  auto actions = h.feed(SurvivorsCarriedOver{1, "h2", {}, {}});  // rank 3 is gone
  auto fallback = events_named(actions, "recovery.fallback");
  REQUIRE(fallback.size() == 1);
  CHECK(fallback[0]["detail"].get<std::string>().find("rank(s) 3 on h2") != std::string::npos);
  auto stops = of_type<StopGeneration>(actions);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].gen == 1);  // the carried-over workers and the replacement
  CHECK(h.supervisor->state() == RunState::recovering);
  h.feed(CheckpointCommitted{1, 40});
  h.feed(GenerationReleased{1, "h1"});
  auto starts = of_type<StartGeneration>(h.feed(GenerationReleased{1, "h2"}));
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].gen == 2);
  CHECK(h.supervisor->restarts() == 1);  // the same incident: the fallback uses no second restart
  for (int rank = 0; rank < 4; ++rank) h.feed(WorkerStarted{2, rank, 3000 + rank});
  auto completed = events_named(h.feed(WorkerProgress{2, 0, 41, std::nullopt}), "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "restart");
  CHECK(completed[0]["fallback"].get<std::string>().find("rank(s) 3") != std::string::npos);
}

TEST_CASE("an in-place recovery past elastic.in_place_timeout falls back, naming the ranks without a communicator") {
  spec::JobSpec spec = in_place_spec();
  spec.elastic.in_place_timeout = Millis(3000);
  InPlaceHarness h(spec);
  h.rejoin_after_crash();
  h.feed(WorkerCommReady{1, 0});
  h.feed(WorkerCommReady{1, 2});
  h.clock.advance_ms(2900);
  CHECK(events_named(h.feed(Tick{}), "recovery.fallback").empty());
  h.clock.advance_ms(200);
  auto actions = h.feed(Tick{});
  auto fallback = events_named(actions, "recovery.fallback");
  REQUIRE(fallback.size() == 1);
  CHECK(fallback[0]["detail"].get<std::string>().find("no communicator from rank(s) 1,3") != std::string::npos);
  REQUIRE(of_type<StopGeneration>(actions).size() == 1);
}

TEST_CASE("a survivor failing during an in-place recovery makes the same recovery a full restart, with no second restart") {
  InPlaceHarness h(in_place_spec());
  h.crash_rank_2();
  h.carry_over(1);
  auto actions = h.feed(h.exit_code(1, 3, 1));  // a survivor could not rejoin
  auto fallback = events_named(actions, "recovery.fallback");
  REQUIRE(fallback.size() == 1);
  CHECK(fallback[0]["detail"].get<std::string>().find("rank 3") != std::string::npos);
  CHECK(events_named(actions, "recovery.started").empty());
  CHECK(of_type<StopGeneration>(actions).size() == 1);
  CHECK(of_type<ContinueInPlace>(actions).empty());
  CHECK(h.supervisor->restarts() == 1);
  // The failure that started it all stays the root cause.
  REQUIRE(h.supervisor->root_cause());
  CHECK(h.supervisor->root_cause()->rank == 2);
  h.feed(GenerationReleased{1, "h1"});
  auto starts = of_type<StartGeneration>(h.feed(GenerationReleased{1, "h2"}));
  REQUIRE(starts.size() == 1);
  for (int rank = 0; rank < 4; ++rank) h.feed(WorkerStarted{2, rank, 3000 + rank});
  auto completed = events_named(h.feed(WorkerProgress{2, 0, 1, std::nullopt}), "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["cause"]["rank"] == 2);
  CHECK(completed[0]["action"] == "restart");
}

TEST_CASE("a host that failed exclude_after times but cannot be spared is still repaired in place") {
  spec::JobSpec spec = in_place_spec();
  spec.elastic.exclude_after = 1;
  InPlaceHarness h(spec);
  auto actions = h.feed(h.exit_code(0, 2, 1));
  REQUIRE(of_type<ContinueInPlace>(actions).size() == 1);
  CHECK(events_named(actions, "host.exclusion_skipped").size() == 1);
}

TEST_CASE("without elastic.in_place, recovery stops every worker as before") {
  spec::JobSpec spec = in_place_spec();
  spec.elastic.in_place = false;
  InPlaceHarness plain(spec);
  auto actions = plain.feed(plain.exit_code(0, 2, 1));
  CHECK(of_type<ContinueInPlace>(actions).empty());
  CHECK(of_type<StopGeneration>(actions).size() == 1);
}

TEST_CASE("a lost host's ranks move to a spare in place, without a spare the job shrinks the usual way") {
  spec::JobSpec spec = in_place_spec();
  spec::HostEntry spare;
  spare.name = "spare1";
  spare.slots = 2;
  spec.spares.push_back(spare);
  InPlaceHarness h(spec);
  h.feed(HostConnected{"spare1"});
  auto actions = h.feed(HostLost{"h2", "silent", 5000});
  auto continued = of_type<ContinueInPlace>(actions);
  REQUIRE(continued.size() == 1);
  CHECK(continued[0].replaced == std::vector<int>{2, 3});
  CHECK(continued[0].plan.ranks[2].host == "spare1");
  CHECK(continued[0].plan.ranks[0].host == "h1");
  CHECK(continued[0].hosts == std::vector<std::string>{"h1", "spare1"});
  CHECK(h.supervisor->restarts() == 0);  // a membership change
  CHECK(h.supervisor->excluded_hosts().count("h2") == 1);
  REQUIRE(events_named(actions, "plan.changed").size() == 1);
  h.feed(SurvivorsCarriedOver{1, "h1", {0, 1}, {1000, 1001}});
  h.feed(SurvivorsCarriedOver{1, "spare1", {}, {}});
  h.feed(WorkerStarted{1, 2, 2002});
  h.feed(WorkerStarted{1, 3, 2003});
  h.all_comm_ready(1);
  auto completed = events_named(h.feed(WorkerProgress{1, 3, 51, std::nullopt}), "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["kind"] == "host.lost");
  CHECK(completed[0]["action"] == "in-place");

  spec::JobSpec shrinking = in_place_spec();
  shrinking.elastic.min_hosts = 1;
  InPlaceHarness shrink(shrinking);
  auto lost = shrink.feed(HostLost{"h2", "silent", 5000});
  CHECK(of_type<ContinueInPlace>(lost).empty());
  CHECK(of_type<StopGeneration>(lost).size() == 1);
}

TEST_CASE("after an in-place attempt falls back, beats of the generation being stopped do not complete the recovery") {
  spec::JobSpec spec = in_place_spec();
  spec.elastic.in_place_timeout = Millis(3000);
  InPlaceHarness h(spec);
  h.rejoin_after_crash();
  REQUIRE(h.supervisor->phase() == Supervisor::Phase::in_place_running);
  h.clock.advance_ms(3100);
  REQUIRE(events_named(h.feed(Tick{}), "recovery.fallback").size() == 1);
  REQUIRE(h.supervisor->phase() == Supervisor::Phase::recovering);
  // A survivor still beats until its agent stops it: the recovery is not over.
  CHECK(events_named(h.feed(WorkerProgress{1, 0, 51, std::nullopt}), "recovery.completed").empty());
  h.feed(GenerationReleased{1, "h1"});
  auto starts = of_type<StartGeneration>(h.feed(GenerationReleased{1, "h2"}));
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].gen == 2);
  h.feed(WorkerStarted{2, 0, 3000});
  // Neither before every worker of the restarted generation runs.
  CHECK(events_named(h.feed(WorkerProgress{2, 0, 1, std::nullopt}), "recovery.completed").empty());
  for (int rank = 1; rank < 4; ++rank) h.feed(WorkerStarted{2, rank, 3000 + rank});
  auto completed = events_named(h.feed(WorkerProgress{2, 0, 2, std::nullopt}), "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "restart");
  CHECK(completed[0]["phases"]["stop_ms"] >= 0);
}

TEST_CASE("an in-place recovery whose generation ends before any of its beats arrives still completes, then the run succeeds") {
  // Killed near the end of a short run: the rest took less than a beat interval, and the final
  // beats can come after the exits. The run log must not hold a recovery that never ended.
  InPlaceHarness h(in_place_spec());
  h.rejoin_after_crash();
  h.all_comm_ready(1);
  h.clock.advance_ms(30);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(events_named(h.feed(h.exit_code(1, rank, 0)), "recovery.completed").empty());
  }
  auto actions = h.feed(h.exit_code(1, 3, 0));
  auto completed = events_named(actions, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["resume_step"] == 50);
  CHECK(completed[0]["steps_lost"] == 0);
  CHECK(completed[0]["phases"].contains("rendezvous_ms"));
  CHECK(h.supervisor->last_recovery());
  CHECK(h.supervisor->state() == RunState::stopping);  // succeeding: releasing the generation
  auto finish = of_type<FinishRun>(h.release_all(1));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::succeeded);
}

TEST_CASE("a restarted generation that ends before any of its beats arrives completes the recovery at its end") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.elastic.max_restarts = 2;
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  h.feed(CheckpointCommitted{0, 20});
  h.feed(WorkerProgress{0, 0, 27, {}});
  h.feed(h.exit_code(0, 1, 1));
  REQUIRE(of_type<StartGeneration>(h.release_all(0)).size() == 1);
  h.start_all(1);
  h.clock.advance_ms(300);
  CHECK_FALSE(has_event(h.feed(h.exit_code(1, 0, 0)), "recovery.completed"));
  auto actions = h.feed(h.exit_code(1, 1, 0));
  REQUIRE(has_event(actions, "recovery.completed"));
  REQUIRE(h.supervisor->last_recovery());
  const events::RecoveryCompleted& recovery = h.supervisor->last_recovery()->completed;
  CHECK(recovery.resume_step == 20);
  CHECK(recovery.steps_lost == 7);
  CHECK(recovery.phases["first_step_ms"] == 300);
  auto finish = of_type<FinishRun>(h.release_all(1));
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::succeeded);
}

TEST_CASE("auto hang_timeout: the supervisor records the value in force and a hang names the limit it passed") {
  spec::JobSpec spec = make_spec(1, 2);
  spec.heartbeat.hang_timeout = Millis(0);  // auto, the default
  Harness h(spec);
  auto started = h.connect_all();
  auto warm = events_named(started, "hang_timeout.changed");
  REQUIRE(warm.size() == 1);
  CHECK(warm[0]["basis"] == "warm-up");
  CHECK(warm[0]["hang_timeout_ms"] == 60000);
  CHECK(warm[0]["gen"] == 0);
  h.start_all(0);
  std::vector<nlohmann::json> changes;
  for (int step = 1; step <= 12; ++step) {
    h.clock.advance_ms(400);
    for (int rank = 0; rank < 2; ++rank) {
      auto actions = h.feed(WorkerProgress{0, rank, step, {}});
      for (const nlohmann::json& change : events_named(actions, "hang_timeout.changed")) changes.push_back(change);
    }
    CHECK(!has_event(h.feed(Tick{}), "worker.hang"));
  }
  REQUIRE(changes.size() == 1);  // leaving warm-up, once
  CHECK(changes[0]["basis"] == "floor");
  CHECK(changes[0]["hang_timeout_ms"] == 2500);  // 5 heartbeat intervals of 500 ms; 5 x 400 ms is less
  CHECK(h.supervisor->hang_timeouts().limits().hang_timeout_ms == 2500);
  // Rank 1 stops; rank 0 goes on.
  for (int step = 13; step <= 19; ++step) {
    h.clock.advance_ms(400);
    h.feed(WorkerProgress{0, 0, step, {}});
    auto actions = h.feed(Tick{});
    if (step < 19) CHECK(!has_event(actions, "worker.hang"));  // up to 2.4 s quiet
    else REQUIRE(has_event(actions, "worker.hang"));           // 2.8 s
    if (step == 19) {
      auto hangs = events_named(actions, "worker.hang");
      CHECK(hangs[0]["rank"] == 1);
      CHECK(hangs[0]["limit_ms"] == 2500);
      CHECK(h.supervisor->root_cause()->detail == "no step progress for 2.8s at step 12 (heartbeat.hang_timeout 2.5s auto)");
    }
  }
}

TEST_CASE("auto hang_timeout: no hang while a host of the generation is unheard (host loss decides first)") {
  spec::JobSpec spec = make_spec(2, 1);
  spec.heartbeat.hang_timeout = Millis(0);
  Harness h(spec);
  h.connect_all();
  h.start_all(0);
  for (int step = 1; step <= 12; ++step) {
    h.clock.advance_ms(400);
    h.feed(WorkerProgress{0, 0, step, {}});
    h.feed(WorkerProgress{0, 1, step, {}});
  }
  REQUIRE(h.supervisor->hang_timeouts().limits().hang_timeout_ms == 2500);
  h.clock.advance_ms(3000);  // every rank quiet past the limit: h2 may be gone
  CHECK(!has_event(h.feed(Tick{{"h2"}}), "worker.hang"));
  CHECK(has_event(h.feed(Tick{{"elsewhere"}}), "worker.hang"));  // a host of no plan defers nothing
}

TEST_CASE("an explicit hang_timeout is not deferred by an unheard host (it is longer than heartbeat.timeout)") {
  Harness h(make_spec(2, 1));
  h.connect_all();
  h.start_all(0);
  h.feed(WorkerProgress{0, 0, 1, {}});
  h.feed(WorkerProgress{0, 1, 1, {}});
  h.clock.advance_ms(20001);
  CHECK(has_event(h.feed(Tick{{"h2"}}), "worker.hang"));
}

TEST_CASE("a host the first plan does without (quarantined) stays out of every later plan") {
  // h2 is quarantined in the registry: submit planned without it (spare h4 in its place). When
  // h3 is lost later, the new plan must not take h2 back: it shrinks to h1 and h4.
  spec::JobSpec spec = make_spec(3, 1);
  spec::HostEntry spare;
  spare.name = "h4";
  spare.slots = 1;
  spare.spare = true;
  spec.spares.push_back(spare);
  spec.elastic.min_hosts = 2;
  Result<plan::RankPlan> first = plan::make_plan(spec, {"h2"});
  REQUIRE(first.ok());
  FakeClock clock;
  Supervisor supervisor(spec, *first, clock);
  CHECK(supervisor.excluded_hosts().count("h2") == 1);
  for (const char* host : {"h1", "h3", "h4"}) supervisor.on_event(HostConnected{host});
  for (int rank = 0; rank < first->world_size; ++rank) supervisor.on_event(WorkerStarted{0, rank, 1000 + rank});
  supervisor.on_event(HostLost{"h3", "channel closed"});
  std::vector<StartGeneration> starts;
  for (const char* host : {"h1", "h4"}) {
    auto actions = supervisor.on_event(GenerationReleased{0, host});
    for (const StartGeneration& start : of_type<StartGeneration>(actions)) starts.push_back(start);
  }
  REQUIRE(starts.size() == 1);
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : starts[0].plan.hosts) hosts.push_back(host.entry.name);
  CHECK(hosts == std::vector<std::string>{"h1", "h4"});
}
