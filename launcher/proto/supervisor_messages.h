#pragma once
// The supervisor → agent messages (messages.h is the catalogue) as typed structs: the driver
// builds them and serialises them with to_json(); the agent reads every frame it receives only
// through parse_supervisor_message(). A supervisor is a peer process too (another version, a
// corrupted stream): a field of the wrong type is an Error naming the message and the field
// (`kill.gen: expected an integer, got a string "one"`), never an exception in the agent's loop.
// parse_supervisor_message(to_json(m)) == m for every message (proto_round_trip_test).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/proto/host_health.h"
#include "launcher/proto/relay_messages.h"
#include "launcher/proto/stack_fingerprint.h"

namespace dtrain::proto {

/// Most warm standbys one spawn may ask for (elastic.standby_per_host).
inline constexpr int kMaxStandbys = 64;
/// Most modules a pool's bootstrap imports before its assign (spec worker.pool.imports).
inline constexpr size_t kMaxStandbyImports = 64;

using EnvVars = std::map<std::string, std::string>;

struct AgentConfig {
  int protocol = 0;
  std::string run_id{};
  std::string host{};
  std::string runtime_dir{};
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  std::optional<int64_t> supervisor_time_ms{};
  bool batch_beats = false;  ///< worker beats ride on the agent's beat (messages.h)
  /// Fingerprint this host's software stack for this worker command and say it in hello
  /// (spec consistency: strict or warn); absent: no fingerprint.
  std::optional<StackProbeRequest> stack{};
  /// Check this host's health after hello and say it in a health frame (id 0); absent: no checks.
  std::optional<HealthRequest> health{};
  /// Keep the workers and wait this long for a re-attach when the channel ends (messages.h);
  /// absent or 0: fence at once, as a directly connected agent does.
  std::optional<int64_t> reattach_ms{};
  bool operator==(const AgentConfig&) const = default;
};

/// One worker of a spawn: its own environment goes over the spawn's common one.
struct SpawnWorker {
  int rank = 0;
  int local_rank = 0;
  EnvVars env{};
  bool operator==(const SpawnWorker&) const = default;
};
struct SpawnRequest {
  int gen = 0;
  std::vector<std::string> argv{};  ///< never empty
  std::optional<std::string> workdir{};
  EnvVars env{};  ///< common to every worker (and to the standbys)
  std::vector<SpawnWorker> workers{};
  std::optional<int64_t> log_tail_lines{};
  bool instrument = false;
  /// Warm standbys to keep (0 to kMaxStandbys); absent: as the previous spawn said.
  std::optional<int> standby{};
  /// Present: the standbys are a pool of an unmodified script (spec worker.pool), waiting in the
  /// bootstrap after importing these modules, and every worker of a spawn takes one when one is
  /// ready (not only a join-live one). Absent: as the previous spawn said.
  std::optional<std::vector<std::string>> standby_bootstrap{};
  bool operator==(const SpawnRequest&) const = default;
};

enum class KillSignal { term, kill };
const char* to_string(KillSignal signal);  ///< "TERM", "KILL"

struct KillRequest {
  int gen = 0;  ///< -1: every generation
  KillSignal signal = KillSignal::term;
  int64_t grace_ms = 0;
  /// Only these workers of gen (never empty when present); absent: every worker of gen.
  std::optional<std::vector<int>> ranks{};
  bool operator==(const KillRequest&) const = default;
};
struct PingRequest {
  std::optional<int64_t> id{};
  std::optional<int64_t> supervisor_time_ms{};
  bool operator==(const PingRequest&) const = default;
};
/// A worker-protocol line (wire.h: kv.*, gen.ok, error, ckpt.request) for one worker. The agent
/// relays it as it is; the worker parses it. Checked to be an object.
struct ToWorkerRequest {
  int gen = 0;
  int rank = 0;
  nlohmann::json msg = nlohmann::json::object();
  bool operator==(const ToWorkerRequest&) const = default;
};
struct ReservePortRequest {
  std::optional<int64_t> id{};
  bool operator==(const ReservePortRequest&) const = default;
};
/// The first frame to a fresh agent process that is to carry a detached agent's channel instead of
/// being an agent itself: the detached agent's hello.attach_socket.
struct AgentAttachRequest {
  std::string socket{};
  bool operator==(const AgentAttachRequest&) const = default;
};
struct FenceRequest {
  std::optional<std::string> reason{};
  bool operator==(const FenceRequest&) const = default;
};
struct SampleRequest {
  std::optional<int64_t> id{};
  int gen = 0;
  int rank = 0;
  int64_t pid = 0;
  int64_t timeout_ms = 0;
  bool operator==(const SampleRequest&) const = default;
};
struct DumpRequest {
  std::optional<int64_t> id{};
  int gen = 0;
  int64_t timeout_ms = 0;
  bool operator==(const DumpRequest&) const = default;
};
/// In-place recovery: the live workers of `from` now belong to `to` (> from).
struct GenChangedRequest {
  int64_t id = 0;
  int from = 0;
  int to = 0;
  bool operator==(const GenChangedRequest&) const = default;
};

/// Run the health checks now (messages.h health): before a re-rendezvous takes the host in, or
/// after it was blamed for a failure (with the site's diagnose command when asked).
struct HealthCheckRequest {
  int64_t id = 0;
  std::string moment{};
  bool diagnose = false;
  bool operator==(const HealthCheckRequest&) const = default;
};

using SupervisorMessage = std::variant<AgentConfig, SpawnRequest, KillRequest, PingRequest, ToWorkerRequest,
                                       ReservePortRequest, FenceRequest, SampleRequest, DumpRequest,
                                       GenChangedRequest, HealthCheckRequest, RelayOpenRequest, RelayToRequest,
                                       RelayCloseRequest, AgentAttachRequest, RelayFanoutRequest>;

/// The frame of one message: "type" first, then its fields (absent optionals left out).
nlohmann::json to_json(const SupervisorMessage& message);

/// The whole frame of one message, as encode_frame_checked(to_json(message)) makes it, byte for
/// byte. relay_to (every frame for a relayed host, base64 inside) is written directly: through
/// nlohmann::json its long string was escaped a character at a time, a tenth of a supervisor's
/// loop at 16,384 relayed hosts.
Result<std::string> encode_supervisor_frame(const SupervisorMessage& message);

/// The wire "type" of a message (messages.h msg::).
const char* type_of(const SupervisorMessage& message);

/// Checks one decoded frame (an object with a string "type"; frame.h guarantees that much).
/// Unknown extra fields are ignored; an unknown type is an error. Never throws.
Result<SupervisorMessage> parse_supervisor_message(const nlohmann::json& frame);

}  // namespace dtrain::proto
