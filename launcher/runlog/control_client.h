#pragma once
// The client side of a run's control socket (ctl.sock): one newline-terminated JSON request,
// one newline-terminated JSON reply, then the connection closes. The supervisor (launcher/run)
// serves it; `dtrain stop` uses it: {"type":"stop"} → {"type":"ok","state":"stopping"}.

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/runlog/control_protocol.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain {

/// Where ctl.sock points (the real socket in the runtime directory), or ctl.sock itself if it
/// is not a symlink. Error (infra) when it does not exist: no supervisor serves the run.
Result<std::string> control_socket_path(const RunDirectory& run);

/// Sends `request` over `socket_path` and returns the (ok) reply, all within `timeout`. A
/// refusal {"type":"error","message":m} becomes a user Error carrying m; transport problems
/// are infra Errors naming the socket.
Result<ControlReply> send_control_to(const std::string& socket_path, const ControlRequest& request,
                                     Millis timeout);

/// send_control_to(control_socket_path(run), ...).
Result<ControlReply> send_control(const RunDirectory& run, const ControlRequest& request, Millis timeout);

}  // namespace dtrain
