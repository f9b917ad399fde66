#pragma once
// One shell command on one host over SSH, to its end: what drills need to act on a host from
// outside its agent (kill every process of a run there, check that nothing of it is left, start
// a self-healing firewall cut). Built on the job's SSH client (SshOptions::client: SshTransport
// or OpensshTransport) with SshOptions::remote_command, so host keys, identities, ssh_config and
// timeouts follow the job spec exactly as the agent's connection does.

#include <optional>
#include <string>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/transport/ssh_transport.h"

namespace dtrain::transport {

struct RemoteCommandResult {
  int exit_code = -1;        ///< the command's exit status; -1 when it ended by a signal
  std::string exit_signal;   ///< "KILL" when it ended by a signal, else ""
  std::string output;        ///< its stdout
  std::string diagnostics;   ///< its stderr
};

/// Runs `command` with /bin/sh on `target` (options.remote_command is replaced by it) and waits
/// for it to end, at most `deadline` in all (connection included). Errors (infra) name the host
/// and say why: the connection failed (reason from the transport), or the deadline passed.
/// A command that ran and failed is not an error: see exit_code. (openssh: a command that exits
/// with 255 cannot be told from ssh's own failure and counts as the connection failing.)
Result<RemoteCommandResult> ssh_exec(SshOptions options, const AgentTarget& target, const std::string& command,
                                     Millis deadline);

}  // namespace dtrain::transport
