// FrameRouter with a scripted link: frame bodies in, and what comes out — the supervisor Events
// (fed to a real, pure Supervisor), the events recorded, the files and lines written, the rank
// progress — checked. No sockets, no processes.

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include <spdlog/sinks/null_sink.h>

#include "launcher/base/clock.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/proto/messages.h"
#include "launcher/run/frame_router.h"
#include "tests/unit/plan_support.h"
#include "tests/unit/recording_connection.h"

using namespace dtrain;
using namespace dtrain::run;
using nlohmann::json;

namespace {

spec::JobSpec two_hosts_of_two_ranks() {
  spec::JobSpec spec = plan::testing::make_spec({"h1", "h2"}, 2, 1, 1, 4);
  spec.worker.command = {"train"};
  return spec;
}

/// The router's outside world, recording everything in the order it happened.
struct Outside : FrameRouter::Output {
  explicit Outside(supervisor::Supervisor& supervisor) : supervisor(supervisor) {}

  void feed(const supervisor::Event& event) override {
    order.push_back("feed");
    fed.push_back(event);
    for (const supervisor::Action& action : supervisor.on_event(event)) actions.push_back(action);
  }
  void record(json event) override {
    order.push_back("record " + event.value("ev", ""));
    records.push_back(std::move(event));
  }
  void write_file_then_record(std::string path, std::string text, json event) override {
    files[path] = text;
    record(std::move(event));
  }
  void write_unsynced_file(std::string path, std::string text) override { files[path] = text; }
  void rank_output(int rank, int, std::string_view, std::string line) override { output[rank] += line + "\n"; }
  void console_line(std::string text) override { console.push_back(std::move(text)); }
  spdlog::logger& log() override { return logger; }
  void metrics_line(json line) override { metrics.push_back(std::move(line)); }
  void host_lost(AgentLink& link, const std::string& reason) override {
    link.lost = true;
    lost.push_back(link.host() + ": " + reason);
  }
  void ping(AgentLink& link) override { pinged.push_back(link.host()); }
  void send_store_replies(const std::vector<store::StoreReply>& replies) override {
    store_replies.insert(store_replies.end(), replies.begin(), replies.end());
  }
  void port_reserved(int64_t request_id, int port) override { ports.emplace_back(request_id, port); }
  void port_reservation_failed(const std::string& host, const std::string& error) override {
    port_failures.push_back(host + ": " + error);
  }
  void relay_from(AgentLink& relay, proto::RelayFromReport from) override {
    relayed.push_back(relay.host() + " carried " + std::to_string(from.data.size()) + " bytes of " + from.host);
  }
  void agent_connected(AgentLink& link) override { relayed.push_back(link.host() + " connected"); }
  void relay_closed(AgentLink& relay, const proto::RelayClosedReport& closed) override {
    relayed.push_back(relay.host() + " closed " + closed.host + ": " + closed.reason);
  }
  void relay_batch(AgentLink& relay, proto::RelayBatchReport batch) override {
    relayed.push_back(relay.host() + " carried a batch of " + std::to_string(batch.messages.size()));
  }
  void agent_reattached(AgentLink& link, const proto::ReattachedReport& report) override {
    relayed.push_back(link.host() + " re-attached with " + std::to_string(report.workers.size()) + " workers");
    link.reattaching.reset();
  }

  std::vector<json> named(const std::string& name) const {
    std::vector<json> found;
    for (const json& event : records) {
      if (event.value("ev", "") == name) found.push_back(event);
    }
    return found;
  }
  template <class T>
  std::vector<T> fed_of_type() const {
    std::vector<T> found;
    for (const supervisor::Event& event : fed) {
      if (const T* typed = std::get_if<T>(&event)) found.push_back(*typed);
    }
    return found;
  }

  supervisor::Supervisor& supervisor;
  spdlog::logger logger{"router-test", std::make_shared<spdlog::sinks::null_sink_mt>()};
  std::vector<std::string> order;
  std::vector<supervisor::Event> fed;
  std::vector<supervisor::Action> actions;
  std::vector<json> records;
  std::map<std::string, std::string> files;
  std::map<int, std::string> output;
  std::vector<std::string> console;
  std::vector<json> metrics;
  std::vector<std::string> lost;
  std::vector<std::string> pinged;
  std::vector<store::StoreReply> store_replies;
  std::vector<std::pair<int64_t, int>> ports;
  std::vector<std::string> port_failures;
  std::vector<std::string> relayed;  ///< relay_from / relay_closed, as text
};

/// A router over a real supervisor of 2 hosts × 2 ranks, both agents connected, generation 0
/// spawned (as the driver would have it), and one scripted link per host.
struct Scripted {
  Scripted()
      : spec(two_hosts_of_two_ranks()),
        plan(*plan::make_plan(spec)),
        supervisor(spec, plan, clock),
        outside(supervisor),
        run(RunDirectory::at("/nonexistent/run", "run-1")),
        router(outside, supervisor, store, progress, run, clock) {
    for (const char* host : {"h1", "h2"}) {
      links[host] = std::make_unique<AgentLink>(host, std::make_unique<testing::RecordingConnection>(sent[host]),
                                                clock.monotonic_ms(), clock.wall_ms());
    }
    for (const char* host : {"h1", "h2"}) outside.feed(supervisor::HostConnected{host});
    REQUIRE(supervisor.generation() == 0);
    progress.reset(plan.ranks.size());
    outside.feed(supervisor::GenerationSpawned{0});
    outside.fed.clear();
    outside.order.clear();
    outside.records.clear();
  }

  void frame(const std::string& host, const json& body) { router.route(*links.at(host), body.dump()); }
  /// A worker's beat as an agent batches it (beat.worker_beats).
  void beat(const std::string& host, int gen, int rank, const json& worker_beat) {
    frame(host, {{"type", "beat"},
                 {"agent_time_ms", clock.wall_ms()},
                 {"workers", json::array()},
                 {"worker_beats", {{{"gen", gen}, {"rank", rank}, {"pid", 100 + rank}, {"msg", worker_beat}}}}});
  }

  FakeClock clock;
  spec::JobSpec spec;
  plan::RankPlan plan;
  supervisor::Supervisor supervisor;
  Outside outside;
  store::KvStore store;
  RankProgressTable progress;
  RunDirectory run;
  FrameRouter router;
  std::map<std::string, std::string> sent;  ///< what the driver would have sent each agent
  std::map<std::string, std::unique_ptr<AgentLink>> links;
};

}  // namespace

TEST_CASE("a worker's beat becomes the rank's progress and one WorkerProgress for the supervisor") {
  Scripted scripted;
  scripted.clock.advance_ms(1234);
  scripted.beat("h2", 0, 3, {{"type", "beat"}, {"step", 7}, {"loss", 0.25}, {"step_ms", 40.0}, {"comm_ms", 10.0},
                             {"samples", 32}, {"phase", "checkpoint"}});
  auto progress = scripted.outside.fed_of_type<supervisor::WorkerProgress>();
  REQUIRE(progress.size() == 1);
  CHECK(progress[0].gen == 0);
  CHECK(progress[0].rank == 3);
  CHECK(progress[0].step == 7);
  CHECK(progress[0].in_checkpoint == std::optional<bool>(true));
  const RankProgress* rank = scripted.progress.find(3);
  REQUIRE(rank);
  CHECK(rank->metrics.loss == std::optional<double>(0.25));
  CHECK(rank->metrics.step_ms == std::optional<double>(40.0));
  CHECK(rank->metrics.comm_ms == std::optional<double>(10.0));
  CHECK(rank->metrics.samples == std::optional<double>(32));
  CHECK(rank->speaks_protocol);
  CHECK(rank->last_beat_wall_ms == scripted.clock.wall_ms());
  CHECK_FALSE(scripted.progress.find(2)->speaks_protocol);  // the others: untouched
  CHECK(scripted.outside.records.empty());                  // a beat is no event
  // The supervisor saw it: the rank's step is its view too.
  CHECK(scripted.supervisor.ranks()[3].step == 7);

  // A later beat without a loss keeps the last one.
  scripted.beat("h2", 0, 3, {{"type", "beat"}, {"step", 8}});
  CHECK(scripted.progress.find(3)->metrics.loss == std::optional<double>(0.25));
  CHECK(scripted.supervisor.ranks()[3].step == 8);
}

TEST_CASE("a beat of another generation, or of a rank past the plan, changes nothing") {
  Scripted scripted;
  scripted.beat("h1", 5, 0, {{"type", "beat"}, {"step", 3}, {"loss", 1.0}});
  scripted.beat("h1", 0, 9, {{"type", "beat"}, {"step", 3}, {"loss", 1.0}});
  CHECK(scripted.outside.fed.empty());
  CHECK_FALSE(scripted.progress.find(0)->metrics.loss);
  CHECK_FALSE(scripted.progress.find(9));
}

TEST_CASE("a worker's exit is recorded with its local rank and log, then fed, its tail is kept for the summary") {
  Scripted scripted;
  scripted.frame("h2", {{"type", "exit"}, {"gen", 0}, {"rank", 3}, {"pid", 103}, {"code", 3},
                        {"agent_time_ms", scripted.clock.wall_ms()}, {"tail", {"line 1", "Traceback: boom"}},
                        {"killed_by_agent", false}});
  // Recorded first, then fed: the failure the supervisor records follows the exit in events.jsonl.
  REQUIRE(scripted.outside.order.size() >= 2);
  CHECK(scripted.outside.order[0] == "record worker.exit");
  CHECK(scripted.outside.order[1] == "feed");
  auto exits = scripted.outside.named("worker.exit");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0]["rank"] == 3);
  CHECK(exits[0]["local_rank"] == 1);
  CHECK(exits[0]["host"] == "h2");
  CHECK(exits[0]["code"] == 3);
  CHECK(exits[0]["log"] == scripted.run.rank_log_path(3));
  auto exited = scripted.outside.fed_of_type<supervisor::WorkerExited>();
  REQUIRE(exited.size() == 1);
  CHECK(exited[0].rank == 3);
  CHECK(exited[0].code == std::optional<int>(3));
  REQUIRE(scripted.router.exit_tail(3));
  CHECK(scripted.router.exit_tail(3)->back() == "Traceback: boom");
  CHECK_FALSE(scripted.router.exit_tail(2));
  // The supervisor took it as the failure it is.
  CHECK(scripted.supervisor.root_cause().has_value());
}

TEST_CASE("an agent's hello: connected, facts written, a ping for the clock offset, the supervisor told") {
  Scripted scripted;
  scripted.frame("h1", {{"type", "hello"}, {"protocol", proto::kProtocolVersion}, {"version", "x"}, {"pid", 77},
                        {"agent_time_ms", scripted.clock.wall_ms()}, {"facts", {{"cpus", 8}}}});
  CHECK(scripted.links["h1"]->connected);
  CHECK(scripted.outside.pinged == std::vector<std::string>{"h1"});
  CHECK(scripted.outside.files.count(scripted.run.host_facts_path("h1")) == 1);
  CHECK(scripted.outside.named("host.connected").size() == 1);
  CHECK(scripted.outside.named("host.facts").size() == 1);
  CHECK(scripted.outside.fed_of_type<supervisor::HostConnected>().size() == 1);

  // An agent of another protocol is lost, not connected.
  scripted.frame("h2", {{"type", "hello"}, {"protocol", proto::kProtocolVersion + 1}, {"version", "y"}, {"pid", 78}});
  REQUIRE(scripted.outside.lost.size() == 1);
  CHECK(scripted.outside.lost[0].find("h2: agent speaks protocol") == 0);
}

TEST_CASE("frames that do not parse: each one an event, the 100th loses the host") {
  Scripted scripted;
  scripted.router.route(*scripted.links["h1"], "{not json");
  auto errors = scripted.outside.named("protocol.error");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0]["host"] == "h1");
  CHECK(scripted.outside.console.size() == 1);  // the first is shown, the rest only recorded
  CHECK(scripted.outside.lost.empty());
  for (int i = 1; i < kMaxProtocolErrorsPerSender; ++i) scripted.router.route(*scripted.links["h1"], "[]");
  CHECK(scripted.outside.named("protocol.error").size() == static_cast<size_t>(kMaxProtocolErrorsPerSender));
  CHECK(scripted.outside.console.size() == 1);
  REQUIRE(scripted.outside.lost.size() == 1);
  CHECK(scripted.outside.lost[0].rfind("h1: the agent sent 100 messages that could not be parsed", 0) == 0);
}

TEST_CASE("a worker's message that does not parse is its own protocol error, a request still gets an error reply") {
  Scripted scripted;
  scripted.frame("h1", {{"type", "from_worker"}, {"gen", 0}, {"rank", 1}, {"pid", 101},
                        {"msg", {{"type", "kv.get"}, {"id", 12}}}});
  auto errors = scripted.outside.named("protocol.error");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0]["rank"] == 1);
  REQUIRE(scripted.outside.store_replies.size() == 1);
  CHECK(scripted.outside.store_replies[0].to.rank == 1);
  const auto* failed = std::get_if<proto::RequestFailed>(&scripted.outside.store_replies[0].msg);
  REQUIRE(failed != nullptr);
  CHECK(failed->id == 12);
}

TEST_CASE("NCCL WARN lines: the first of a rank is an event, its repeats within the window one more at its end") {
  Scripted scripted;
  for (int i = 0; i < 5; ++i) {
    scripted.frame("h1", {{"type", "log"}, {"gen", 0}, {"rank", 0}, {"stream", "stderr"},
                          {"line", "host:1:1 [0] NCCL WARN Net : Connection closed " + std::to_string(i)}});
  }
  CHECK(scripted.outside.output[0].size() > 0);  // every line reaches the rank's log
  CHECK(scripted.outside.named("comm.warn").size() == 1);
  scripted.router.flush_comm_warns(false);  // the window is still open
  CHECK(scripted.outside.named("comm.warn").size() == 1);
  scripted.clock.advance_ms(10'000);
  scripted.router.flush_comm_warns(false);
  auto warns = scripted.outside.named("comm.warn");
  REQUIRE(warns.size() == 2);
  CHECK(warns[1]["repeated"] == 4);
}

TEST_CASE("a port reply and a port refusal go to the driver, which knows what it asked for") {
  Scripted scripted;
  scripted.frame("h1", {{"type", "port"}, {"id", 5}, {"port", 29500}});
  REQUIRE(scripted.outside.ports.size() == 1);
  CHECK(scripted.outside.ports[0] == std::make_pair<int64_t, int>(5, 29500));
  scripted.frame("h1", {{"type", "error"}, {"message", "no free port"}, {"about", "reserve_port"}});
  CHECK(scripted.outside.port_failures == std::vector<std::string>{"h1: no free port"});
  CHECK(scripted.outside.named("agent.error").size() == 1);
}

TEST_CASE("a relay's frames go to the driver as they are: bytes of a relayed host, the end of its session") {
  Scripted s;
  s.frame("h1", {{"type", "relay_from"}, {"host", "h9"}, {"data", "AAAAAnt9"}});  // base64 of 6 bytes
  s.frame("h1", {{"type", "relay_closed"}, {"host", "h9"}, {"reason", "h9: connection refused"}});
  s.frame("h1", {{"type", "relay_from"}, {"host", "h9"}, {"data", "not base64!"}});
  REQUIRE(s.outside.relayed == std::vector<std::string>{"h1 carried 6 bytes of h9", "h1 closed h9: h9: connection refused"});
  // The third is a protocol error of h1's, not bytes of h9's.
  REQUIRE(s.outside.named("protocol.error").size() == 1);
  CHECK(s.outside.named("protocol.error")[0].dump().find("relay_from.data: not base64") != std::string::npos);
}

TEST_CASE("reattached: only on a re-attaching link of the same agent, and only its own live ranks' exits are fed") {
  Scripted scripted;
  AgentLink& h2 = *scripted.links.at("h2");
  h2.agent_pid = 42;
  json exits = json::array({{{"type", "exit"}, {"gen", 0}, {"rank", 3}, {"pid", 103}, {"code", 3}, {"tail", json::array()}},
                            {{"type", "exit"}, {"gen", 0}, {"rank", 0}, {"pid", 100}, {"code", 3}, {"tail", json::array()}}});
  json report = {{"type", "reattached"}, {"host", "h2"}, {"pid", 42}, {"detached_ms", 180},
                 {"reason", "stdin EOF"}, {"workers", {{{"gen", 0}, {"rank", 2}, {"pid", 102}}}}, {"exits", exits}};

  // Not a re-attach: a protocol error naming the host, nothing fed.
  scripted.frame("h2", report);
  CHECK(scripted.outside.named("protocol.error").size() == 1);
  CHECK(scripted.outside.fed.empty());

  h2.reattaching = AgentLink::Reattach{"h0", "its relay h0 was lost", 0};
  scripted.frame("h2", report);
  CHECK(scripted.outside.relayed == std::vector<std::string>{"h2 re-attached with 1 workers"});
  CHECK_FALSE(h2.reattaching);
  // Rank 3 is h2's and still live: its exit, lost with the relay, is fed now. Rank 0 is h1's.
  auto exited = scripted.outside.fed_of_type<supervisor::WorkerExited>();
  REQUIRE(exited.size() == 1);
  CHECK(exited[0].rank == 3);

  // Another agent answering a re-attach: the host is lost.
  h2.reattaching = AgentLink::Reattach{"h0", "its relay h0 was lost", 0};
  report["pid"] = 43;
  scripted.frame("h2", report);
  CHECK(scripted.outside.lost.size() == 1);
}
