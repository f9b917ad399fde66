#pragma once
// The per-host agent, run as the hidden `dtrain agent` subcommand: one per host, started by the
// supervisor over SSH or a pipe. It speaks the framed protocol of launcher/proto/messages.h on
// `input_fd`/`output_fd`, and nothing else ever goes to `output_fd` (diagnostics go to stderr).
//
// It is a child subreaper, so every descendant of its workers (even one that daemonised with
// setsid) stays its descendant; and it fences itself — kills everything, reaps it, says bye and
// exits — on stdin EOF, a `fence` message, SIGTERM/SIGINT/SIGHUP, the death of its parent, a
// frame it cannot understand, or silence from the supervisor for heartbeat_timeout_ms. No worker
// outlives its agent.

namespace dtrain::agent {

/// Runs the agent until it fences. Returns the process exit code: 0 after stdin EOF or a
/// `fence` message, 3 (infra) after supervisor silence, a protocol error or a setup failure
/// (runtime directory, socket), 130 after a signal.
int run_agent(int input_fd, int output_fd);

}  // namespace dtrain::agent
