// GenerationLauncher with recording links: the supervisor's Actions in (from a real, pure
// Supervisor), and what comes out — the frames each agent would get, the events recorded, the
// Events fed back — checked. No sockets, no processes.

#include <doctest/doctest.h>

#include <memory>

#include <spdlog/sinks/null_sink.h>

#include "launcher/base/clock.h"
#include "launcher/events/events.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/supervisor_messages.h"
#include "launcher/run/generation_launcher.h"
#include "tests/unit/plan_support.h"
#include "tests/unit/recording_connection.h"

using namespace dtrain;
using namespace dtrain::run;
using nlohmann::json;

namespace {

/// The launcher's outside world: Events go to the supervisor, whose Actions come back to the
/// launcher as the driver's perform() would hand them over.
struct Outside : GenerationLauncher::Output {
  explicit Outside(supervisor::Supervisor& supervisor) : supervisor(supervisor) {}

  void feed(const supervisor::Event& event) override {
    fed.push_back(event);
    for (const supervisor::Action& action : supervisor.on_event(event)) {
      if (const auto* start = std::get_if<supervisor::StartGeneration>(&action)) launcher->start_generation(*start);
      if (const auto* stop = std::get_if<supervisor::StopGeneration>(&action)) launcher->stop_generation(*stop);
    }
  }
  void record(json event) override { records.push_back(std::move(event)); }
  void write_file(std::string path, std::string text) override { files[path] = text; }
  spdlog::logger& log() override { return logger; }
  void send_store_replies(const std::vector<store::StoreReply>& replies) override {
    store_replies += static_cast<int>(replies.size());
  }

  template <class T>
  int fed_of_type() const {
    int count = 0;
    for (const supervisor::Event& event : fed) count += std::holds_alternative<T>(event) ? 1 : 0;
    return count;
  }

  supervisor::Supervisor& supervisor;
  GenerationLauncher* launcher = nullptr;
  spdlog::logger logger{"launcher-test", std::make_shared<spdlog::sinks::null_sink_mt>()};
  std::vector<supervisor::Event> fed;
  std::vector<json> records;
  std::map<std::string, std::string> files;
  int store_replies = 0;
};

spec::JobSpec two_hosts_of_two_ranks() {
  spec::JobSpec spec = plan::testing::make_spec({"h1", "h2"}, 2, 1, 1, 4);
  spec.worker.command = {"train"};
  return spec;
}

/// A launcher over a real supervisor of 2 hosts × 2 ranks and one recording link per host.
struct Scripted {
  Scripted()
      : spec(two_hosts_of_two_ranks()),
        supervisor(spec, *plan::make_plan(spec), clock),
        outside(supervisor),
        run(RunDirectory::at("/nonexistent/run", "run-1")),
        launcher(outside, spec, run, supervisor, store, progress, links, clock, "launch-node") {
    outside.launcher = &launcher;
    for (const char* host : {"h1", "h2"}) {
      links[host] = std::make_unique<AgentLink>(host, std::make_unique<testing::RecordingConnection>(sent[host]),
                                                clock.monotonic_ms(), clock.wall_ms());
    }
  }

  /// The messages sent to `host` since the last call.
  std::vector<proto::SupervisorMessage> frames(const std::string& host) {
    proto::FrameDecoder decoder;
    decoder.feed(sent[host]);
    sent[host].clear();
    std::vector<proto::SupervisorMessage> messages;
    while (true) {
      Result<std::optional<json>> next = decoder.next();
      REQUIRE(next);
      if (!*next) break;
      Result<proto::SupervisorMessage> message = proto::parse_supervisor_message(**next);
      REQUIRE(message);
      messages.push_back(*message);
    }
    return messages;
  }

  FakeClock clock;
  spec::JobSpec spec;
  supervisor::Supervisor supervisor;
  Outside outside;
  store::KvStore store;
  RankProgressTable progress;
  RunDirectory run;
  std::map<std::string, std::string> sent;  ///< what each agent would have received
  AgentLinks links;
  GenerationLauncher launcher;
};

}  // namespace

TEST_CASE("a generation starts with a port asked of rank 0's agent, then one spawn frame per host") {
  Scripted scripted;
  for (const char* host : {"h1", "h2"}) scripted.outside.feed(supervisor::HostConnected{host});
  REQUIRE(scripted.supervisor.generation() == 0);
  CHECK(scripted.outside.files.count(scripted.run.plan_path(0)) == 1);

  std::vector<proto::SupervisorMessage> to_rank0 = scripted.frames("h1");
  REQUIRE(to_rank0.size() == 1);
  const auto* reserve = std::get_if<proto::ReservePortRequest>(&to_rank0[0]);
  REQUIRE(reserve != nullptr);
  REQUIRE(reserve->id);
  const int64_t port_request = *reserve->id;
  CHECK(scripted.frames("h2").empty());

  scripted.launcher.port_reserved(port_request + 1, 29500);  // not the request pending: ignored
  CHECK(scripted.frames("h1").empty());
  CHECK(scripted.outside.fed_of_type<supervisor::GenerationSpawned>() == 0);

  scripted.launcher.port_reserved(port_request, 29500);
  for (const char* host : {"h1", "h2"}) {
    std::vector<proto::SupervisorMessage> to_host = scripted.frames(host);
    REQUIRE(to_host.size() == 1);
    const auto* spawn = std::get_if<proto::SpawnRequest>(&to_host[0]);
    REQUIRE(spawn != nullptr);
    CHECK(spawn->gen == 0);
    CHECK(spawn->workers.size() == 2);
  }
  REQUIRE(scripted.outside.records.size() == 1);
  Result<events::GenerationSpawned> spawned = events::GenerationSpawned::from_json(scripted.outside.records[0]);
  REQUIRE(spawned);
  CHECK(spawned->gen == 0);
  CHECK(spawned->master_port == 29500);
  CHECK(scripted.outside.fed_of_type<supervisor::GenerationSpawned>() == 1);
  // Pings take their ids from the same sequence as the port request.
  CHECK(scripted.launcher.take_request_id() == port_request + 1);
}

TEST_CASE("a stop sends TERM to connected hosts and releases a lost one at once") {
  Scripted scripted;
  scripted.links.at("h2")->lost = true;
  scripted.launcher.stop_generation(supervisor::StopGeneration{3, 2000, {"h1", "h2"}});
  std::vector<proto::SupervisorMessage> to_h1 = scripted.frames("h1");
  REQUIRE(to_h1.size() == 1);
  const auto* kill = std::get_if<proto::KillRequest>(&to_h1[0]);
  REQUIRE(kill != nullptr);
  CHECK(kill->gen == 3);
  CHECK(kill->signal == proto::KillSignal::term);
  CHECK(kill->grace_ms == 2000);
  CHECK(scripted.frames("h2").empty());
  REQUIRE(scripted.outside.fed_of_type<supervisor::GenerationReleased>() == 1);
  CHECK(std::get<supervisor::GenerationReleased>(scripted.outside.fed.back()).host == "h2");
}

TEST_CASE("a port reservation that fails ends the generation waiting for it") {
  Scripted scripted;
  for (const char* host : {"h1", "h2"}) scripted.outside.feed(supervisor::HostConnected{host});
  std::vector<proto::SupervisorMessage> to_rank0 = scripted.frames("h1");
  REQUIRE(to_rank0.size() == 1);
  const int64_t port_request = std::get<proto::ReservePortRequest>(to_rank0[0]).id.value_or(-1);
  scripted.launcher.port_reservation_failed("h2", "not rank 0's host");  // ignored
  CHECK(scripted.outside.fed_of_type<supervisor::LaunchStepFailed>() == 0);
  scripted.launcher.port_reservation_failed("h1", "no free port");
  CHECK(scripted.outside.fed_of_type<supervisor::LaunchStepFailed>() == 1);
  scripted.frames("h1");  // whatever the failure made the supervisor stop
  scripted.frames("h2");
  scripted.launcher.port_reserved(port_request, 29500);  // too late: nothing spawns
  CHECK(scripted.frames("h1").empty());
  CHECK(scripted.frames("h2").empty());
  CHECK(scripted.outside.fed_of_type<supervisor::GenerationSpawned>() == 0);
}
