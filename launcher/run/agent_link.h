#pragma once
// One host's agent as the driver sees it: the transport connection, the frame decoder, liveness
// and the clock offset measured at hello.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/proto/frame.h"
#include "launcher/proto/supervisor_messages.h"
#include "launcher/transport/transport.h"

namespace dtrain::run {

class AgentLink {
 public:
  /// Told about a message send() refused (its Error says "internal bug: ...", the type and
  /// the size); without one, the refusal is written to stderr.
  using RefusalHandler = std::function<void(const Error& refused)>;

  AgentLink(std::string host, std::unique_ptr<transport::AgentConnection> connection,
            int64_t now_ms, int64_t now_wall_ms, RefusalHandler on_refused = {});

  const std::string& host() const { return host_; }
  transport::AgentConnection& connection() { return *connection_; }

  /// A new connection to the same agent (a re-attach after its relay's loss): the old one is
  /// shut down, the decoder starts afresh, and the silence clock from `now_ms`.
  void replace_connection(std::unique_ptr<transport::AgentConnection> connection, int64_t now_ms, int64_t now_wall_ms);

  /// Frames one message to the agent. A message whose frame would be over
  /// proto::kMaxFrameBytes is not sent (the agent would drop the stream and fence its host): it
  /// goes to the RefusalHandler instead, and the link stays up. Returns whether it was sent.
  bool send(const proto::SupervisorMessage& message);
  /// The same for a frame built by hand (tests of the frame limit).
  bool send(const nlohmann::json& message);

  /// What one receive() decoded: the bodies of the complete frames, unparsed (the driver's
  /// proto::AgentFrameParser reads them; a bad one is one protocol error, the stream goes on).
  struct Received {
    std::vector<std::string> frames;
  };
  /// Decodes what arrived. An Error means the stream is broken (the host is then lost).
  Result<Received> receive(int64_t now_ms);

  /// Called at hello: offset = supervisor wall time − agent wall time, corrected by half the
  /// round trip since config was sent.
  void measure_offset(int64_t agent_time_ms, int64_t now_wall_ms);
  /// At every pong: the same estimate from a ping's own round trip, kept when that round trip
  /// is the shortest so far. Over SSH the hello's "round trip" includes connecting and
  /// authenticating, so its offset can be off by a large fraction of a second — enough to
  /// blame a worker that our own stop killed for the failure that caused the stop. A no-op for
  /// a local agent, which shares our clock.
  void refine_offset(int64_t ping_sent_wall_ms, int64_t agent_time_ms, int64_t now_wall_ms);
  /// Converts an agent timestamp to the supervisor's clock.
  int64_t to_supervisor_time(int64_t agent_time_ms) const { return agent_time_ms + offset_ms_; }
  int64_t offset_ms() const { return offset_ms_; }
  /// How far off offset_ms() may be: half the round trip it was measured with.
  int64_t offset_uncertainty_ms() const { return offset_round_trip_ms_ < 0 ? 0 : (offset_round_trip_ms_ + 1) / 2; }

  int64_t last_heard_ms() const { return last_heard_ms_; }
  /// Something of this agent's arrived another way than through its connection (its relay's
  /// relay_batch): its silence clock starts again.
  void heard(int64_t now_ms) { last_heard_ms_ = now_ms; }
  bool connected = false;   ///< hello received
  bool lost = false;        ///< reported as HostLost; ignore further traffic
  bool health_requested = false;  ///< config.health was sent: the agent reports its checks
  nlohmann::json facts;     ///< from hello
  std::string relayed_by;   ///< the relay that carries this agent's stream (scale.tree); "": direct
  int64_t agent_pid = 0;    ///< from hello
  std::string attach_socket;  ///< from hello (config.reattach_ms): where a re-attach connects
  /// Set from the re-attach's start (its relay was lost) until the agent's reattached frame.
  struct Reattach {
    std::string from;        ///< the lost relay
    std::string reason;      ///< why the relayed session ended
    int64_t started_ms = 0;  ///< monotonic
  };
  std::optional<Reattach> reattaching;

 private:
  bool send_frame(Result<std::string> frame);
  std::string host_;
  std::unique_ptr<transport::AgentConnection> connection_;
  RefusalHandler on_refused_;
  proto::FrameDecoder decoder_;
  int64_t last_heard_ms_ = 0;
  int64_t config_sent_wall_ms_ = 0;
  int64_t offset_ms_ = 0;
  int64_t offset_round_trip_ms_ = -1;  ///< round trip of the sample offset_ms_ came from
};

/// Every host's agent link, by host name: the driver owns them; the parts that send or read
/// them (GenerationLauncher, SnapshotWriter) hold this map by reference.
using AgentLinks = std::map<std::string, std::unique_ptr<AgentLink>>;

}  // namespace dtrain::run
