#pragma once
// The relay messages (issue 32, docs/architecture.md §1 "Relays"): an agent that relays reaches
// other hosts' agents over SSH on the supervisor's behalf and carries their streams, so that the
// supervisor holds one connection per relay instead of one per host. A relayed stream is the
// agent protocol itself, byte for byte (the child's frames, then the supervisor's), carried in
// base64 inside relay frames: the relay never reads or rewrites a child's messages, and the
// supervisor reads them exactly as it reads a directly connected agent's.
//
// supervisor → relay
//   relay_open  {ssh:{...}, children:[{host, user, port, dtrain_path}]}
//               start an agent on each child over SSH with these settings (the transport the
//               supervisor would use: libssh2 or the system's ssh, host-key policy, identity
//               files read on the relay's host, provisioning by copying the relay's own binary).
//               Once per connection; a second one adds children.
//   relay_to    {host, data}    bytes for that child's agent (base64)
//   relay_fanout {hosts, data}  the same bytes for each of these children: one frame for what
//               every child of a relay gets alike (the supervisor's pings), instead of one each
//   relay_close {host}          close that child's input and end its session
// relay → supervisor
//   relay_from   {host, data?, diagnostics?}   the child's bytes (base64) and its stderr text
//   relay_closed {host, reason}                the child's session ended (never started, or
//                                              its agent exited, or relay_close)
//   relay_batch  {messages:[{host, message}]}  the children's beats and pongs, gathered for up
//               to kRelayBatchHoldMs (relay_batcher.h): one frame for what would be a frame
//               per host, read by the supervisor as if each host had sent its own. The relay
//               re-encodes only messages it parsed whole; every other frame, and a stream whose
//               framing broke, goes on byte for byte in relay_from, in the host's order
// The parsers are the supervisor_messages / agent_messages ones (this header is their part).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/json_fields.h"
#include "launcher/base/result.h"

namespace dtrain::proto {

/// Most children one relay_open may name.
inline constexpr size_t kMaxRelayChildren = 65'536;
/// A relayed stream travels in pieces of at most this many bytes (relay_to, relay_from): a frame
/// of the agent protocol may be up to kMaxFrameBytes, and base64 makes it a third larger.
inline constexpr size_t kMaxRelayChunkBytes = 1 << 20;
/// A piece's `data` as it travels: base64 makes 4 bytes of every 3.
inline constexpr size_t kMaxRelayEncodedChunkBytes = (kMaxRelayChunkBytes + 2) / 3 * 4;
/// How long a relay holds its children's beats and pongs before it sends them (relay_batch),
/// and the most bytes of them it holds: a batch stays within the supervisor's fast parse.
inline constexpr int64_t kRelayBatchHoldMs = 100;
inline constexpr size_t kMaxRelayBatchBytes = 512 << 10;
/// Longest host name, and longest reason or diagnostics text, in a relay message.
inline constexpr size_t kMaxRelayHostBytes = 1024;
inline constexpr size_t kMaxRelayReasonBytes = 64 << 10;

/// How a relay reaches its children: the part of the run's SSH settings (transport::SshOptions)
/// that travels. Paths are read on the relay's host.
struct RelaySsh {
  std::string client = "libssh2";       ///< "libssh2" | "openssh" (ssh.client)
  std::string user{};
  int port = 22;
  std::vector<std::string> identity_files{};
  bool use_agent = true;
  std::string known_hosts{};
  std::string host_key_policy = "strict";  ///< "strict" | "accept-new" | "insecure"
  int64_t connect_timeout_ms = 10'000;
  int64_t provision_timeout_ms = 120'000;
  int max_parallel = 64;
  std::string remote_dtrain{};
  std::string openssh_config{};
  std::string openssh_program = "ssh";
  bool operator==(const RelaySsh&) const = default;
};

struct RelayChild {
  std::string host{};
  std::string user{};
  int port = 0;
  std::string dtrain_path{};
  bool operator==(const RelayChild&) const = default;
};

struct RelayOpenRequest {
  RelaySsh ssh{};
  std::vector<RelayChild> children{};
  bool operator==(const RelayOpenRequest&) const = default;
};

/// Bytes for one child's agent (decoded: `data` holds the raw protocol bytes).
struct RelayToRequest {
  std::string host{};
  std::string data{};
  bool operator==(const RelayToRequest&) const = default;
};

/// The same bytes for each listed child's agent (decoded), as if each had its own relay_to.
struct RelayFanoutRequest {
  std::vector<std::string> hosts{};
  std::string data{};
  bool operator==(const RelayFanoutRequest&) const = default;
};

struct RelayCloseRequest {
  std::string host{};
  bool operator==(const RelayCloseRequest&) const = default;
};

/// Bytes from one child's agent (decoded) and what it wrote to stderr.
struct RelayFromReport {
  std::string host{};
  std::string data{};
  std::string diagnostics{};
  bool operator==(const RelayFromReport&) const = default;
};

struct RelayClosedReport {
  std::string host{};
  std::string reason{};
  bool operator==(const RelayClosedReport&) const = default;
};

/// A parsed relay message as the variant `Message` (supervisor or agent messages), or its Error.
template <class Message, class T>
Result<Message> lift(Result<T> parsed) {
  if (!parsed) return parsed.error();
  return Message(std::move(parsed).value());
}

nlohmann::json relay_to_json(const RelayOpenRequest& message);
nlohmann::json relay_to_json(const RelayToRequest& message);
nlohmann::json relay_to_json(const RelayFanoutRequest& message);
nlohmann::json relay_to_json(const RelayCloseRequest& message);
nlohmann::json relay_to_json(const RelayFromReport& message);
nlohmann::json relay_to_json(const RelayClosedReport& message);

/// Each reads the fields of a frame whose type is already known (reader names the message).
Result<RelayOpenRequest> parse_relay_open(FieldReader& reader);
Result<RelayToRequest> parse_relay_to(FieldReader& reader);
Result<RelayFanoutRequest> parse_relay_fanout(FieldReader& reader);
Result<RelayCloseRequest> parse_relay_close(FieldReader& reader);
Result<RelayFromReport> parse_relay_from(FieldReader& reader);
Result<RelayClosedReport> parse_relay_closed(FieldReader& reader);

}  // namespace dtrain::proto
