#include "launcher/transport/ssh_exec.h"

#include <poll.h>

#include <algorithm>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"
#include "launcher/transport/openssh_transport.h"

namespace dtrain::transport {
namespace {

/// Drives one connection of either client (both have failed(), exit_code(),
/// next_deadline_ms()) to its end.
template <typename Connection>
Result<RemoteCommandResult> run_to_end(Connection& connection, const AgentTarget& target, const std::string& command,
                                       Millis deadline) {
  SystemClock clock;
  // The command reads nothing: EOF at once, so one that does read cannot hang on us.
  connection.close_input();
  RemoteCommandResult result;
  int64_t give_up = clock.monotonic_ms() + deadline.count();
  while (!connection.closed()) {
    int64_t now = clock.monotonic_ms();
    if (now >= give_up) {
      connection.shutdown(0);
      return Error::infra(target.host + ": `" + command.substr(0, 60) + (command.size() > 60 ? "..." : "") +
                          "` did not finish within " + format_duration(deadline) + " over SSH");
    }
    std::vector<pollfd> fds = connection.poll_fds();
    int64_t wait_ms = std::min<int64_t>(100, give_up - now);
    if (int64_t next = connection.next_deadline_ms(); next >= 0) wait_ms = std::clamp<int64_t>(next - now, 0, wait_ms);
    if (fds.empty()) wait_ms = std::min<int64_t>(wait_ms, 10);
    ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
    connection.pump();
    result.output += connection.take_received();
    result.diagnostics += connection.take_diagnostics();
  }
  result.output += connection.take_received();
  result.diagnostics += connection.take_diagnostics();
  if (connection.failed()) return Error::infra(connection.close_reason());
  return result;
}

}  // namespace

Result<RemoteCommandResult> ssh_exec(SshOptions options, const AgentTarget& target, const std::string& command,
                                     Millis deadline) {
  options.remote_command = "exec /bin/sh -c " + shell_quote(command);
  // The connection's own setup deadline must not outlast ours.
  options.connect_timeout = std::min(options.connect_timeout, deadline);
  if (options.client == SshClient::openssh) {
    OpensshTransport transport(std::move(options));
    Result<std::unique_ptr<OpensshConnection>> started = transport.connect(target);
    if (!started) return started.error();
    Result<RemoteCommandResult> result = run_to_end(**started, target, command, deadline);
    if (!result) return result;
    result->exit_code = (*started)->exit_code().value_or(-1);
    return result;
  }
  SshTransport transport(std::move(options));
  Result<std::unique_ptr<SshConnection>> started = transport.connect(target);
  if (!started) return started.error();
  Result<RemoteCommandResult> result = run_to_end(**started, target, command, deadline);
  if (!result) return result;
  result->exit_signal = (*started)->exit_signal();
  result->exit_code = result->exit_signal.empty() ? (*started)->exit_code().value_or(-1) : -1;
  return result;
}

}  // namespace dtrain::transport
