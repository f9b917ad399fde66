// proto::RelayBatcher: what a relay sends the supervisor for its hosts. Beats and pongs are held
// and sent together; everything else goes on byte for byte; and whatever the pieces and the
// timing, each host's messages reach the supervisor in the order the host sent them.

#include "launcher/proto/relay_batcher.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "launcher/proto/frame.h"
#include "launcher/proto/messages.h"

using namespace dtrain;
using namespace dtrain::proto;
using nlohmann::json;

namespace {

AgentBeat beat_at(int64_t step, int rank) {
  AgentBeat beat;
  beat.agent_time_ms = 1000 + step;
  beat.workers = {{0, rank, 4000 + rank, true, "R"}};
  beat.worker_beats = {FromWorker{0, rank, 4000 + rank, WorkerMessage(WorkerBeat{step, {.step_ms = 12.5}, std::nullopt})}};
  return beat;
}

WorkerLogLine log_line(int rank, const std::string& text) {
  WorkerLogLine line;
  line.gen = 0;
  line.rank = rank;
  line.stream = "stdout";
  line.line = text;
  return line;
}

/// What the supervisor reads out of the batcher's messages: each host's messages in the order
/// they arrive (relay_from bytes decoded as a direct stream, relay_batch entries as they stand),
/// as compact JSON for comparing.
struct Supervisor {
  std::map<std::string, FrameDecoder> streams;
  std::map<std::string, std::vector<std::string>> read;
  std::map<std::string, std::string> raw;  ///< every relay_from byte, per host
  std::map<std::string, std::string> diagnostics;
  std::vector<AgentMessage> sent;           ///< what the batcher sent, in order
  int batches = 0;

  void take(const AgentMessage& message) {
    sent.push_back(message);
    if (const auto* from = std::get_if<RelayFromReport>(&message)) {
      raw[from->host] += from->data;
      diagnostics[from->host] += from->diagnostics;
      FrameDecoder& decoder = streams[from->host];
      decoder.feed(from->data);
      for (;;) {
        Result<std::optional<json>> frame = decoder.next();
        if (!frame || !frame->has_value()) break;
        Result<AgentMessage> parsed = parse_agent_message(**frame);
        read[from->host].push_back(parsed ? to_json(*parsed).dump() : "error: " + parsed.error().message);
      }
    } else if (const auto* batch = std::get_if<RelayBatchReport>(&message)) {
      ++batches;
      // It travels as a frame: the fast parser reads it whole.
      std::string body = to_json(message).dump();
      CHECK(body.size() < kMaxFastFrameBytes);
      for (const RelayedMessage& relayed : batch->messages) {
        read[relayed.host].push_back(std::visit([](const auto& typed) { return to_json(AgentMessage(typed)).dump(); }, relayed.message));
      }
    } else {
      FAIL("the batcher sends only relay_from and relay_batch");
    }
  }
};

RelayBatcher batcher_for(Supervisor& supervisor) {
  return RelayBatcher([&supervisor](AgentMessage message) { supervisor.take(message); });
}

}  // namespace

TEST_CASE("beats and pongs of many hosts go out as one relay_batch once the first has waited 100 ms") {
  Supervisor supervisor;
  RelayBatcher batcher = batcher_for(supervisor);
  for (int host = 0; host < 64; ++host) {
    AgentMessage message = host % 4 == 3 ? AgentMessage(Pong{host, 7, 8}) : AgentMessage(beat_at(100, host));
    batcher.received("h" + std::to_string(host), encode_frame(to_json(message)), "", 1000 + host);
  }
  CHECK(batcher.holding());
  CHECK(batcher.due_ms() == 1000 + kRelayBatchHoldMs);
  batcher.flush_due(1000 + kRelayBatchHoldMs - 1);
  CHECK(supervisor.sent.empty());
  batcher.flush_due(1000 + kRelayBatchHoldMs);
  REQUIRE(supervisor.sent.size() == 1);
  const auto& batch = std::get<RelayBatchReport>(supervisor.sent[0]);
  REQUIRE(batch.messages.size() == 64);
  CHECK(batch.messages[5].host == "h5");
  CHECK(std::get<AgentBeat>(batch.messages[5].message) == beat_at(100, 5));
  CHECK(std::get<Pong>(batch.messages[3].message) == Pong{3, 7, 8});
  CHECK_FALSE(batcher.holding());
  // Nothing more to send, whenever asked.
  batcher.flush_due(5000);
  batcher.flush();
  CHECK(supervisor.sent.size() == 1);
}

TEST_CASE("a host's other frames keep their place among its beats, other hosts' beats may wait") {
  Supervisor supervisor;
  RelayBatcher batcher = batcher_for(supervisor);
  batcher.received("h2", encode_frame(to_json(AgentMessage(beat_at(1, 2)))), "", 0);
  // h1: a log line, its beat and another log line, in one read.
  std::string h1 = encode_frame(to_json(AgentMessage(log_line(1, "a")))) + encode_frame(to_json(AgentMessage(beat_at(1, 1)))) +
                   encode_frame(to_json(AgentMessage(log_line(1, "b"))));
  batcher.received("h1", h1, "", 10);
  // The first log line went at once (h1 held nothing). Before the second one, h1's beat had to
  // go: the batch went with h2's beat in it too.
  REQUIRE(supervisor.sent.size() == 3);
  CHECK(std::get<RelayFromReport>(supervisor.sent[0]).host == "h1");
  CHECK(std::get<RelayBatchReport>(supervisor.sent[1]).messages.size() == 2);
  CHECK(std::get<RelayFromReport>(supervisor.sent[2]).data == encode_frame(to_json(AgentMessage(log_line(1, "b")))));
  // h3's log line does not push h1's next beat out early: only a host's own frames do.
  batcher.received("h1", encode_frame(to_json(AgentMessage(beat_at(2, 1)))), "", 20);
  batcher.received("h3", encode_frame(to_json(AgentMessage(log_line(3, "c")))), "ssh: note", 30);
  REQUIRE(supervisor.sent.size() == 4);
  CHECK(std::get<RelayFromReport>(supervisor.sent[3]).host == "h3");
  CHECK(std::get<RelayFromReport>(supervisor.sent[3]).diagnostics == "ssh: note");
  CHECK(batcher.holding());
  CHECK(batcher.due_ms() == 20 + kRelayBatchHoldMs);
}

TEST_CASE("any pieces, any timing: every host's messages reach the supervisor whole and in its order") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937 random(seed);
    Supervisor supervisor;
    RelayBatcher batcher = batcher_for(supervisor);
    std::map<std::string, std::vector<std::string>> sent_by_host;
    std::map<std::string, std::string> streams;  // each host's bytes not yet handed over
    int beats_and_pongs = 0;
    for (int i = 0; i < 600; ++i) {
      std::string host = "h" + std::to_string(random() % 12);
      AgentMessage message = Pong{};
      switch (random() % 6) {
        case 0: message = log_line(1, "line " + std::to_string(i)); break;
        case 1: message = Pong{i, i + 1, i + 2}; break;
        case 2: message = WorkerStartedReport{0, 1, 4001}; break;
        default: message = beat_at(i, 1); break;
      }
      if (std::holds_alternative<AgentBeat>(message) || std::holds_alternative<Pong>(message)) ++beats_and_pongs;
      sent_by_host[host].push_back(to_json(message).dump());
      streams[host] += encode_frame(to_json(message));
    }
    int64_t now = 0;
    while (!streams.empty()) {
      auto stream = std::next(streams.begin(), static_cast<long>(random() % streams.size()));
      size_t piece = std::min<size_t>(stream->second.size(), 1 + random() % 400);
      batcher.received(stream->first, stream->second.substr(0, piece), "", now);
      stream->second.erase(0, piece);
      if (stream->second.empty()) streams.erase(stream);
      now += static_cast<int64_t>(random() % 8);
      batcher.flush_due(now);
    }
    batcher.flush();
    CHECK(supervisor.read == sent_by_host);
    // Batched, not one frame each, even though a third of the frames are others, each of
    // which sends the batch when its host has a message in it.
    CHECK(supervisor.batches > 0);
    CHECK(supervisor.batches < beats_and_pongs / 3);
  }
}

TEST_CASE("a stream whose framing broke goes on byte for byte, so the supervisor says what broke") {
  Supervisor supervisor;
  RelayBatcher batcher = batcher_for(supervisor);
  std::string beat = encode_frame(to_json(AgentMessage(beat_at(1, 0))));
  std::string broken = std::string("\x7f\xff\xff\xff", 4) + "garbage";
  batcher.received("h0", beat + broken, "", 0);
  batcher.received("h0", "more bytes", "", 1);
  batcher.flush();
  // The beat went first, as a batch; then every byte from the bad length on.
  REQUIRE(supervisor.sent.size() == 3);
  CHECK(std::holds_alternative<RelayBatchReport>(supervisor.sent[0]));
  CHECK(supervisor.raw["h0"] == broken + "more bytes");
  FrameDecoder direct;
  direct.feed(broken);
  Result<std::optional<json>> expected = direct.next();
  REQUIRE_FALSE(expected.ok());
  FrameDecoder relayed;
  relayed.feed(supervisor.raw["h0"]);
  Result<std::optional<json>> got = relayed.next();
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().message == expected.error().message);
}

TEST_CASE("a beat the fast parser doubts, and any other frame, travel exactly as the host sent them") {
  Supervisor supervisor;
  RelayBatcher batcher = batcher_for(supervisor);
  // A \u escape: the generic parser decides what it means, on the supervisor.
  std::string doubtful = frame_of_body(R"({"type":"beat","workers":[{"gen":0,"rank":0,"state":"\u0052"}]})");
  std::string not_json = frame_of_body(R"({"type":"beat",)");
  batcher.received("h0", doubtful + not_json, "", 0);
  CHECK_FALSE(batcher.holding());
  CHECK(supervisor.raw["h0"] == doubtful + not_json);
}

TEST_CASE("a host's session ends: its held messages go first, then a frame it cut short, as it was") {
  Supervisor supervisor;
  RelayBatcher batcher = batcher_for(supervisor);
  std::string pong = encode_frame(to_json(AgentMessage(Pong{1, 2, 3})));
  std::string half = encode_frame(to_json(AgentMessage(log_line(0, "cut")))).substr(0, 9);
  batcher.received("h0", pong + half, "", 0);
  CHECK(supervisor.sent.empty());
  batcher.forget("h0");
  REQUIRE(supervisor.sent.size() == 2);
  CHECK(std::holds_alternative<RelayBatchReport>(supervisor.sent[0]));
  CHECK(std::get<RelayFromReport>(supervisor.sent[1]).data == half);
  batcher.forget("h0");  // once is enough
  CHECK(supervisor.sent.size() == 2);
}

TEST_CASE("a batch stays within kMaxRelayBatchBytes: many large beats at once go in several") {
  Supervisor supervisor;
  RelayBatcher batcher = batcher_for(supervisor);
  AgentBeat large = beat_at(1, 0);
  for (int rank = 1; rank < 64; ++rank) large.worker_beats.push_back(beat_at(1, rank).worker_beats[0]);
  size_t body = to_json(AgentMessage(large)).dump().size();
  int hosts = static_cast<int>(3 * kMaxRelayBatchBytes / body);
  for (int host = 0; host < hosts; ++host) batcher.received("h" + std::to_string(host), encode_frame(to_json(AgentMessage(large))), "", 0);
  batcher.flush();
  CHECK(supervisor.batches >= 3);
  size_t carried = 0;
  for (const AgentMessage& message : supervisor.sent) {
    CHECK(to_json(message).dump().size() <= kMaxRelayBatchBytes + body);
    carried += std::get<RelayBatchReport>(message).messages.size();
  }
  CHECK(carried == static_cast<size_t>(hosts));
}
