// SshConnection's provisioning: which dtrain runs as the agent on the host (a configured
// command or path, a cached or PATH copy that is byte for byte this binary, or a fresh copy
// uploaded and checked), and starting it (ssh_transport.h).

#include <libssh2.h>

#include "launcher/base/strings.h"
#include "launcher/transport/ssh_shared.h"

namespace dtrain::transport {
namespace {

/// What the probe prints, one "key value" per line (values may contain spaces).
std::string probe_command(const std::string& version) {
  return "v=" + shell_quote(version) +
         "; c=\"$HOME/.cache/dtrain/$v/dtrain\"\n"
         "echo \"os $(uname -s) $(uname -m)\"\n"
         "echo \"home $HOME\"\n"
         "if [ -x \"$c\" ]; then echo \"cache_sha $(sha256sum < \"$c\" | cut -c1-64)\"; fi\n"
         "p=$(command -v dtrain 2>/dev/null) && echo \"path_bin $p\" && "
         "echo \"path_version $(\"$p\" --version 2>/dev/null | head -n 1)\" && "
         "echo \"path_sha $(sha256sum < \"$p\" | cut -c1-64)\"\n"
         "exit 0\n";
}

/// Runs a script with /bin/sh whatever the user's login shell is (csh, fish, ...).
std::string posix_shell(const std::string& script) { return "exec /bin/sh -c " + shell_quote(script); }

std::string probe_value(const std::string& output, const std::string& key) {
  for (const std::string& line : split(output, '\n')) {
    if (starts_with(line, key + " ")) return line.substr(key.size() + 1);
  }
  return {};
}

}  // namespace

void SshConnection::start_remote() {
  const SshOptions& options = shared_->options;
  if (!options.remote_command.empty()) {
    start_channel(ChannelRole::agent, options.remote_command);
  } else if (!target_.dtrain_path.empty() || !options.remote_dtrain.empty()) {
    start_agent_command(!target_.dtrain_path.empty() ? target_.dtrain_path : options.remote_dtrain);
  } else {
    start_channel(ChannelRole::probe, posix_shell(probe_command(options.version)));
  }
}

void SshConnection::start_channel(ChannelRole role, std::string command) {
  channel_ = std::make_unique<ExecChannel>();
  channel_role_ = role;
  channel_->start(session_, std::move(command));
  if (role == ChannelRole::agent) {
    phase_ = SshPhase::starting;
    if (!pending_input_.empty()) channel_->write(std::exchange(pending_input_, {}));
    if (input_closed_) channel_->close_input();
  } else {
    phase_ = role == ChannelRole::probe ? SshPhase::probing : SshPhase::uploading;
  }
}

void SshConnection::start_agent_command(const std::string& remote_path) {
  info_.remote_dtrain = remote_path;
  // `exec`: the agent replaces the login shell and is sshd's direct child (docs/architecture.md
  // §5). Only the path and fixed arguments travel here; configuration goes over the channel.
  std::string command = "exec " + shell_quote(remote_path);
  for (const std::string& argument : shared_->options.agent_args) command += " " + shell_quote(argument);
  start_channel(ChannelRole::agent, command);
}

void SshConnection::finish_probe() {
  const SshOptions& options = shared_->options;
  std::string out = channel_->take_stdout();
  std::string err = channel_->take_stderr();
  if (channel_->state() == ExecChannel::State::failed || channel_->exit_code().value_or(-1) != 0) {
    close_with(target_.host + ": provisioning probe failed: " +
                   (channel_->error().empty() ? std::string(trim(err)) : channel_->error()) +
                   "; fix: set ssh.remote_dtrain to the path of dtrain " + options.version + " on the host",
               true);
    return;
  }
  info_.remote_os = probe_value(out, "os");
  remote_home_ = probe_value(out, "home");
  std::string cache_dir = remote_home_ + "/.cache/dtrain/" + options.version;
  Status loaded = shared_->binary.load();
  if (!loaded) {
    close_with(target_.host + ": provisioning: " + loaded.error().message, true);
    return;
  }
  if (probe_value(out, "cache_sha") == shared_->binary.sha256()) {
    info_.provisioning = "cached";
    start_agent_command(cache_dir + "/dtrain");
    return;
  }
  // A version string is only a claim: a dtrain on PATH runs as the agent only if it is this
  // very binary, byte for byte, like a cached copy. Otherwise the cache gets a fresh copy.
  if (probe_value(out, "path_version") == "dtrain " + options.version) {
    std::string path_bin = probe_value(out, "path_bin");
    if (probe_value(out, "path_sha") == shared_->binary.sha256()) {
      info_.provisioning = "in PATH";
      start_agent_command(path_bin);
      return;
    }
    std::string got = probe_value(out, "path_sha");
    diagnostics_ += "dtrain: " + target_.host + ": " + path_bin + " on PATH says dtrain " + options.version +
                    " but its sha256 differs from this binary's (" + (got.empty() ? std::string("unknown") : got) +
                    " vs " + shared_->binary.sha256() + "); copying this binary to " + cache_dir + " instead\n";
  }
  if (info_.remote_os != shared_->os) {
    close_with(target_.host + ": provisioning: the host runs '" + info_.remote_os + "' but this dtrain is built for '" +
                   shared_->os + "', so it cannot be copied there; fix: install dtrain " + options.version + " on " +
                   target_.host + " and set ssh.remote_dtrain to its path",
               true);
    return;
  }
  if (remote_home_.empty() || remote_home_[0] != '/') {
    close_with(target_.host + ": provisioning: the remote $HOME is '" + remote_home_ +
                   "', not an absolute path; fix: set ssh.remote_dtrain",
               true);
    return;
  }
  // Copy to a temporary name, verify the checksum there, then rename: a concurrent launch or
  // an interrupted copy never leaves a half-written `dtrain` behind.
  upload_path_ = cache_dir + "/dtrain";
  std::string dir = shell_quote(cache_dir);
  std::string command =
      "set -e; umask 077; mkdir -p " + dir + "; t=" + dir + "/dtrain.tmp.$$; trap 'rm -f \"$t\"' EXIT; "
      "cat > \"$t\"; "
      "if ! echo '" + shared_->binary.sha256() + "  '\"$t\" | sha256sum -c --status; then "
      "echo \"checksum mismatch after copy (got $(sha256sum < \"$t\" | cut -c1-64))\" >&2; exit 3; fi; "
      "chmod 0755 \"$t\"; mv -f \"$t\" " + dir + "/dtrain; trap - EXIT; echo ok";
  upload_started_ms_ = now();
  deadline_ = now() + options.provision_timeout.count();
  start_channel(ChannelRole::upload, posix_shell(command));
  channel_->write(*shared_->binary.contents());
  channel_->close_input();
}

void SshConnection::finish_upload() {
  std::string out = channel_->take_stdout();
  std::string err = channel_->take_stderr();
  if (channel_->state() == ExecChannel::State::failed || channel_->exit_code().value_or(-1) != 0 ||
      trim(out) != "ok") {
    close_with(target_.host + ": provisioning: copying dtrain to " + upload_path_ + " failed: " +
                   (channel_->error().empty() ? std::string(trim(err)) : channel_->error()) +
                   "; fix: check free space and permissions of ~/.cache on " + target_.host +
                   ", or install dtrain there and set ssh.remote_dtrain",
               true);
    return;
  }
  int64_t took = now() - upload_started_ms_;
  info_.provisioning = "copied " + megabytes(shared_->binary.contents()->size()) + " in " + format_duration(Millis(took));
  deadline_ = now() + shared_->options.connect_timeout.count();
  start_agent_command(upload_path_);
}

}  // namespace dtrain::transport
