#pragma once
// The control socket's messages (ctl.sock; control_client.h and launcher/run/control_socket.h
// are its two ends) as typed structs, each parsed in one place. One JSON line in, one out:
//   request  {"type":"stop"} | {"type":"status"}
//   reply    {"type":"ok","state":"stopping","generation":3}
//            {"type":"error","message":"unknown request 'x'; expected stop or status"}
// Any local process of the same user can connect, so a request is untrusted input like any other.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain {

enum class ControlRequestType { stop, status };

struct ControlRequest {
  ControlRequestType type = ControlRequestType::status;
  /// stop only: a preemption — every rank is asked to save one step first (preempt_grace), and
  /// the run ends `preempted` (`dtrain stop --checkpoint`).
  bool checkpoint = false;
  bool operator==(const ControlRequest&) const = default;
};

struct ControlReply {
  bool ok = false;
  std::string state;              ///< with ok: the run's state after the request
  std::optional<int> generation;  ///< with ok, for status
  std::string message;            ///< without ok: why the supervisor refused
};

/// One request line (without '\n'). Errors say what was wrong: malformed JSON, not an object,
/// no "type", an unknown type (with the ones there are). Never throws.
Result<ControlRequest> parse_control_request(std::string_view line);

/// One reply line. A reply that is not {"type":"ok"|"error",...} is an Error; an "error" reply
/// is a ControlReply with ok = false and its message (older supervisors put it in "error").
Result<ControlReply> parse_control_reply(std::string_view line);

/// The wire form of a request and of a reply (one line, without '\n'; never throws).
std::string to_line(const ControlRequest& request);
std::string to_line(const ControlReply& reply);

}  // namespace dtrain
