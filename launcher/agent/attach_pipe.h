#pragma once
// `dtrain agent` as a pipe to a detached agent (proto/messages.h: attach, config.reattach_ms).
// When a relay is lost, the supervisor reaches each of its hosts directly and starts a fresh
// `dtrain agent` there whose first frame is attach {socket}: that process connects to the
// detached agent's socket and from then on only carries bytes, the supervisor's to the agent and
// the agent's back, so the agent that kept the workers speaks to the supervisor again over the
// new session. It ends when either side does (the agent then waits for another re-attach or
// fences; the supervisor sees the session close).

#include <string>

namespace dtrain::agent {

/// Connects to `socket_path` and carries bytes between input_fd/output_fd and it until either
/// side ends; `to_agent` (what followed the attach frame) goes first. Returns 0 when either side
/// ended, 3 when the socket could not be reached: an error frame {about:"attach"} on output_fd
/// then says why.
int run_attach_pipe(int input_fd, int output_fd, const std::string& socket_path, std::string to_agent);

}  // namespace dtrain::agent
