// The agent's Outbox across a change of channel (a re-attach, proto/messages.h config.reattach_ms):
// the new stream starts at a frame's first byte with the reattached frame, then every frame the old
// channel took nothing of; a frame the old channel took part of is dropped, never split across two
// streams.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "launcher/agent/outbox.h"
#include "launcher/base/fd.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/frame.h"

using namespace dtrain;

namespace {

/// Every frame readable from `fd` now (non-blocking), decoded as agent messages.
std::vector<proto::AgentMessage> drain(int fd) {
  std::string bytes;
  bool would_block = false;
  while (true) {
    Result<size_t> got = read_some(fd, bytes, &would_block);
    if (!got || *got == 0) break;
  }
  proto::FrameDecoder decoder;
  decoder.feed(bytes);
  std::vector<proto::AgentMessage> messages;
  while (true) {
    auto next = decoder.next();
    REQUIRE(next);
    if (!next->has_value()) break;
    auto message = proto::parse_agent_message(**next);
    REQUIRE(message);
    messages.push_back(*message);
  }
  CHECK(decoder.buffered_bytes() == 0);
  return messages;
}

proto::WorkerLogLine line(int rank, size_t size) { return {0, rank, "stdout", std::string(size, 'x')}; }

/// The old channel and the new one, pipes whose read ends do not block.
struct Channels {
  Pipe old_channel;
  Pipe new_channel;
  Channels() {
    Result<Pipe> made_old = make_pipe();
    Result<Pipe> made_new = make_pipe();
    REQUIRE(made_old);
    REQUIRE(made_new);
    old_channel = std::move(*made_old);
    new_channel = std::move(*made_new);
    REQUIRE(set_nonblocking(old_channel.read_end.get()));
    REQUIRE(set_nonblocking(new_channel.read_end.get()));
  }
  /// After rebinding to the new channel: everything it carries.
  std::vector<proto::AgentMessage> rebind_and_read(agent::Outbox& out) {
    out.rebind(new_channel.write_end.get(), proto::AgentError{"first", "test"});
    CHECK_FALSE(out.detached());
    out.flush_until(0);
    std::vector<proto::AgentMessage> got = drain(new_channel.read_end.get());
    REQUIRE(!got.empty());
    CHECK(std::get<proto::AgentError>(got[0]).message == "first");
    return got;
  }
};

}  // namespace

TEST_CASE("a re-attach drops the frame the old channel took part of, and sends the rest after its first frame") {
  Channels channels;
  agent::Outbox out(channels.old_channel.write_end.get());
  // A pipe holds 64 KiB: the first frame is written whole, the second only in part.
  out.send(line(0, 100));
  out.send(line(1, 200'000));
  out.send(line(2, 300));
  out.flush_some();
  CHECK(out.pending_bytes() > 0);

  out.detach();
  out.send(line(3, 400));  // queued while detached
  out.flush_some();        // writes nothing: no channel
  CHECK(out.detached());
  std::vector<proto::AgentMessage> got = channels.rebind_and_read(out);
  REQUIRE(got.size() == 3);
  CHECK(std::get<proto::WorkerLogLine>(got[1]).rank == 2);
  CHECK(std::get<proto::WorkerLogLine>(got[2]).rank == 3);
  CHECK(out.pending_bytes() == 0);
}

TEST_CASE("a re-attach after every byte went out sends only its first frame and what came after") {
  Channels channels;
  agent::Outbox out(channels.old_channel.write_end.get());
  out.send(line(0, 10));
  out.send(line(1, 10));
  out.flush_some();
  REQUIRE(out.pending_bytes() == 0);
  out.detach();
  out.send(line(2, 10));
  std::vector<proto::AgentMessage> got = channels.rebind_and_read(out);
  REQUIRE(got.size() == 2);
  CHECK(std::get<proto::WorkerLogLine>(got[1]).rank == 2);
}

TEST_CASE("a frame boundary exactly at the old channel's last byte keeps the next frame whole") {
  Channels channels;
  // Fill the pipe exactly with frame 0 so that frame 1 gets nothing: 65,536 bytes in all.
  std::string probe = proto::encode_frame(proto::to_json(proto::AgentMessage(line(0, 0))));
  agent::Outbox out(channels.old_channel.write_end.get());
  out.send(line(0, 65'536 - probe.size()));
  out.send(line(1, 50));
  out.flush_some();
  REQUIRE(::fcntl(channels.old_channel.write_end.get(), F_GETPIPE_SZ) == 65'536);
  std::vector<proto::AgentMessage> old_got = drain(channels.old_channel.read_end.get());
  REQUIRE(old_got.size() == 1);  // frame 0 whole, nothing of frame 1
  out.detach();
  std::vector<proto::AgentMessage> got = channels.rebind_and_read(out);
  REQUIRE(got.size() == 2);
  CHECK(std::get<proto::WorkerLogLine>(got[1]).rank == 1);
}
