// One software stack (spec consistency) in the supervisor, driven by scripted HostConnected
// events that carry each host's stack: strict refuses to start naming the host and both values
// (exit 3, no generation), warn starts with the difference recorded, off compares nothing, an
// unknown value is never held against a host, and a spare that differs is never planned.

#include <doctest/doctest.h>

#include <algorithm>

#include "launcher/events/events.h"
#include "launcher/supervisor/supervisor.h"

using namespace dtrain;
using namespace dtrain::supervisor;

namespace {

spec::JobSpec make_spec(int hosts, spec::Consistency consistency) {
  spec::JobSpec spec;
  spec.name = "stack";
  for (int i = 0; i < hosts; ++i) {
    spec::HostEntry host;
    host.name = "h" + std::to_string(i + 1);
    host.slots = 1;
    spec.hosts.push_back(host);
  }
  spec.worker.command = {"python3", "train.py"};
  spec.consistency = consistency;
  spec.stop_grace = Millis(2000);
  spec.heartbeat.interval = Millis(500);
  spec.heartbeat.timeout = Millis(5000);
  spec.heartbeat.hang_timeout = Millis(20000);
  return spec;
}

void add_spare(spec::JobSpec& spec, const std::string& name) {
  spec::HostEntry spare;
  spare.name = name;
  spare.slots = 1;
  spare.spare = true;
  spec.spares.push_back(spare);
}

events::HostStack stack_of(const std::string& host, const std::string& torch, const std::string& script = "ab12") {
  return events::HostStack{host, {{"python", "3.11.2"}, {"torch", torch}, {"file train.py", script}}, 20};
}

template <class T>
std::vector<T> of_type(const std::vector<Action>& actions) {
  std::vector<T> found;
  for (const Action& action : actions) {
    if (const T* typed = std::get_if<T>(&action)) found.push_back(*typed);
  }
  return found;
}

std::vector<events::StackConsistency> verdicts(const std::vector<Action>& actions) {
  std::vector<events::StackConsistency> found;
  for (const RecordEvent& record : of_type<RecordEvent>(actions)) {
    if (record.event.value("ev", "") != events::kStackConsistency) continue;
    Result<events::StackConsistency> read = events::StackConsistency::from_json(record.event);
    REQUIRE(read);
    found.push_back(*read);
  }
  return found;
}

struct Harness {
  explicit Harness(spec::JobSpec spec_in) : spec(std::move(spec_in)) {
    Result<plan::RankPlan> plan = plan::make_plan(spec);
    REQUIRE(plan.ok());
    supervisor = std::make_unique<Supervisor>(spec, *plan, clock);
  }
  /// Connects each host with its stack (none: the agent said nothing); the actions of all.
  std::vector<Action> connect(const std::vector<std::optional<events::HostStack>>& stacks) {
    std::vector<Action> all;
    for (size_t i = 0; i < stacks.size(); ++i) {
      const std::optional<events::HostStack>& stack = stacks[i];
      std::string host = stack ? stack->host : "h" + std::to_string(i + 1);
      auto actions = supervisor->on_event(HostConnected{host, stack});
      all.insert(all.end(), actions.begin(), actions.end());
    }
    return all;
  }
  spec::JobSpec spec;
  FakeClock clock;
  std::unique_ptr<Supervisor> supervisor;
};

}  // namespace

TEST_CASE("consistency strict: a host with another torch keeps the run from starting, named with both versions") {
  Harness h(make_spec(3, spec::Consistency::strict));
  auto actions = h.connect({stack_of("h1", "2.3.1"), stack_of("h2", "2.3.1"), stack_of("h3", "9.9.9")});
  CHECK(of_type<StartGeneration>(actions).empty());
  auto finish = of_type<FinishRun>(actions);
  REQUIRE(finish.size() == 1);
  CHECK(finish[0].state == RunState::failed);
  CHECK(finish[0].exit_code == ExitCode::infra);
  auto found = verdicts(actions);
  REQUIRE(found.size() == 1);
  CHECK(found[0].action == events::StackConsistency::kRefused);
  CHECK(found[0].hosts == std::vector<std::string>{"h1", "h2", "h3"});
  REQUIRE(found[0].differences.size() == 1);
  CHECK(found[0].differences[0] == events::StackDifference{"h3", "torch", "9.9.9", "2.3.1", 2});
  const std::string& why = h.supervisor->give_up_reason();
  CHECK(why.find("h3 (torch)") != std::string::npos);
  CHECK(why.find("consistency: warn") != std::string::npos);  // the way out is named
  CHECK(h.supervisor->stack_verdicts().size() == 1);
}

TEST_CASE("consistency strict: another copy of the script is a difference like any other") {
  Harness h(make_spec(3, spec::Consistency::strict));
  auto actions = h.connect({stack_of("h1", "2.3.1"), stack_of("h2", "2.3.1", "ffff"), stack_of("h3", "2.3.1")});
  REQUIRE(of_type<FinishRun>(actions).size() == 1);
  auto found = verdicts(actions);
  REQUIRE(found.size() == 1);
  REQUIRE(found[0].differences.size() == 1);
  CHECK(found[0].differences[0] == events::StackDifference{"h2", "file train.py", "ffff", "ab12", 2});
}

TEST_CASE("consistency warn: the run starts and the difference is recorded") {
  Harness h(make_spec(3, spec::Consistency::warn));
  auto actions = h.connect({stack_of("h1", "2.3.1"), stack_of("h2", "2.3.1"), stack_of("h3", "9.9.9")});
  CHECK(of_type<StartGeneration>(actions).size() == 1);
  CHECK(of_type<FinishRun>(actions).empty());
  auto found = verdicts(actions);
  REQUIRE(found.size() == 1);
  CHECK(found[0].action == events::StackConsistency::kWarned);
  CHECK(found[0].verdict == events::StackConsistency::kDiffers);
}

TEST_CASE("an unknown value is not a difference: the run starts and the unknown item is said") {
  Harness h(make_spec(3, spec::Consistency::strict));
  auto actions = h.connect({stack_of("h1", "2.3.1"), stack_of("h2", "unknown (python did not finish within 5s)"),
                            stack_of("h3", "2.3.1")});
  CHECK(of_type<StartGeneration>(actions).size() == 1);
  auto found = verdicts(actions);
  REQUIRE(found.size() == 1);
  CHECK(found[0].verdict == events::StackConsistency::kSame);
  CHECK(found[0].unknown == std::vector<std::string>{"h2: torch"});
}

TEST_CASE("consistency off, or agents that say no stack: nothing compared, nothing recorded") {
  Harness off(make_spec(2, spec::Consistency::off));
  auto actions = off.connect({stack_of("h1", "2.3.1"), stack_of("h2", "9.9.9")});
  CHECK(of_type<StartGeneration>(actions).size() == 1);
  CHECK(verdicts(actions).empty());
  Harness silent(make_spec(2, spec::Consistency::strict));
  actions = silent.connect({std::nullopt, std::nullopt});
  CHECK(of_type<StartGeneration>(actions).size() == 1);
  CHECK(verdicts(actions).empty());
}

TEST_CASE("a spare that differs is left out with its reason, and a lost host is then replaced by none") {
  spec::JobSpec spec = make_spec(2, spec::Consistency::strict);
  spec.elastic.min_hosts = 1;
  add_spare(spec, "s1");
  Harness h(spec);
  // The spare connects first: judged once the hosts are compared.
  auto actions = h.connect({stack_of("s1", "9.9.9"), stack_of("h1", "2.3.1"), stack_of("h2", "2.3.1")});
  REQUIRE(of_type<StartGeneration>(actions).size() == 1);
  auto found = verdicts(actions);
  REQUIRE(found.size() == 2);
  CHECK(found[0].action == events::StackConsistency::kStarted);
  CHECK(found[1].action == events::StackConsistency::kSpareLeftOut);
  CHECK(found[1].hosts == std::vector<std::string>{"s1"});
  CHECK(found[1].detail.find("not used") != std::string::npos);
  CHECK(h.supervisor->excluded_hosts().count("s1") == 1);
  for (int rank = 0; rank < 2; ++rank) h.supervisor->on_event(WorkerStarted{0, rank, 1000 + rank});
  h.supervisor->on_event(HostLost{"h2", "channel closed"});
  auto next = of_type<StartGeneration>(h.supervisor->on_event(GenerationReleased{0, "h1"}));
  REQUIRE(next.size() == 1);
  CHECK(next[0].plan.hosts.size() == 1);  // shrunk: the spare was not taken
  CHECK(next[0].plan.hosts[0].entry.name == "h1");
}

TEST_CASE("a spare that connects after the start is judged at once, and one that matches replaces a lost host") {
  spec::JobSpec spec = make_spec(2, spec::Consistency::warn);
  add_spare(spec, "s1");
  add_spare(spec, "s2");
  Harness h(spec);
  h.connect({stack_of("h1", "2.3.1"), stack_of("h2", "2.3.1")});
  auto late = verdicts(h.supervisor->on_event(HostConnected{"s1", stack_of("s1", "9.9.9")}));
  REQUIRE(late.size() == 1);
  CHECK(late[0].action == events::StackConsistency::kSpareLeftOut);  // warn too: a spare is a choice
  CHECK(verdicts(h.supervisor->on_event(HostConnected{"s2", stack_of("s2", "2.3.1")})).empty());
  for (int rank = 0; rank < 2; ++rank) h.supervisor->on_event(WorkerStarted{0, rank, 1000 + rank});
  h.supervisor->on_event(HostLost{"h2", "channel closed"});
  auto next = of_type<StartGeneration>(h.supervisor->on_event(GenerationReleased{0, "h1"}));
  REQUIRE(next.size() == 1);
  REQUIRE(next[0].plan.hosts.size() == 2);
  CHECK(next[0].plan.hosts[1].entry.name == "s2");
  CHECK(h.supervisor->stack_verdicts().size() == 2);
}
