#include "launcher/transport/openssh_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"

namespace dtrain::transport {
namespace {

constexpr const char* kMarker = "dtrain.openssh ";
constexpr size_t kStderrKept = 4096;
/// After stdout ended, how long an `ssh` that lingers (a ProxyJump child holding a pipe) may
/// keep its exit status from us.
constexpr int64_t kExitAfterEofMs = 1000;

/// An ssh_config value: quoted when it holds blanks (ssh splits option values on them).
std::string config_value(const std::string& value) {
  return value.find_first_of(" \t") == std::string::npos ? value : "\"" + value + "\"";
}

std::string agent_arguments(const SshOptions& options) {
  std::string text;
  for (const std::string& argument : options.agent_args) text += " " + shell_quote(argument);
  return text;
}

/// The remote script when the path of dtrain on the host is known: announce, then exec.
std::string given_path_script(const std::string& path, const SshOptions& options) {
  return "printf 'dtrain.openssh from %s\\n' \"$SSH_CONNECTION\"\n"
         "printf 'dtrain.openssh start given %s\\n' " + shell_quote(path) + "\n"
         "exec " + shell_quote(path) + agent_arguments(options) + "\n";
}

/// The remote script that finds or receives this very binary (by sha256) and execs it: the
/// cached copy, a dtrain on PATH with the same hash, or `size` bytes read from stdin after
/// "need" (copied to a temporary name, verified, then renamed: an interrupted or concurrent
/// copy never leaves a half-written dtrain behind).
std::string provisioning_script(const SshOptions& options, const std::string& sha256, size_t size,
                                const std::string& os) {
  std::string args = agent_arguments(options);
  return "v=" + shell_quote(options.version) + "; s=" + shell_quote(sha256) +
         "; c=\"$HOME/.cache/dtrain/$v/dtrain\"\n"
         "say() { printf 'dtrain.openssh %s\\n' \"$*\"; }\n"
         "say from \"$SSH_CONNECTION\"\n"
         "if [ -x \"$c\" ] && [ \"$(sha256sum < \"$c\" | cut -c1-64)\" = \"$s\" ]; then say start cached \"$c\"; exec \"$c\"" +
         args + "; fi\n"
         "p=$(command -v dtrain 2>/dev/null) && [ -x \"$p\" ] && [ \"$(sha256sum < \"$p\" | cut -c1-64)\" = \"$s\" ] && "
         "{ say start PATH \"$p\"; exec \"$p\"" + args + "; }\n"
         "o=\"$(uname -s) $(uname -m)\"\n"
         "[ \"$o\" = " + shell_quote(os) + " ] || { say os \"$o\"; exit 3; }\n"
         "case $HOME in /*) ;; *) say home \"$HOME\"; exit 3;; esac\n"
         "umask 077; mkdir -p \"${c%/*}\" || exit 3\n"
         "t=\"$c.tmp.$$\"; trap 'rm -f \"$t\"' EXIT\n"
         "say need \"$HOME\"\n"
         "head -c " + std::to_string(size) + " > \"$t\" || exit 3\n"
         "if ! echo \"$s  $t\" | sha256sum -c --status; then say checksum \"$(sha256sum < \"$t\" | cut -c1-64)\"; exit 3; fi\n"
         "chmod 0755 \"$t\" && mv -f \"$t\" \"$c\" || exit 3\n"
         "trap - EXIT\n"
         "say start copied \"$c\"\n"
         "exec \"$c\"" + args + "\n";
}

/// True when `address` is one of this machine's (bind() to it succeeds).
bool is_local_address(const std::string& address) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    length = sizeof *v4;
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    length = sizeof *v6;
  } else {
    return false;
  }
  UniqueFd probe(::socket(storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  return probe.valid() && ::bind(probe.get(), reinterpret_cast<sockaddr*>(&storage), length) == 0;
}

/// ssh's stderr without the warning banner: the lines that say what happened, joined.
std::string ssh_said(const std::string& ssh_stderr) {
  std::vector<std::string> kept;
  for (const std::string& line : split(ssh_stderr, '\n')) {
    std::string_view text = trim(line);
    if (text.empty() || text[0] == '@' || starts_with(text, "IT IS POSSIBLE") ||
        starts_with(text, "Someone could be") || starts_with(text, "It is also possible") ||
        starts_with(text, "Please contact")) {
      continue;
    }
    kept.emplace_back(text);
  }
  if (kept.size() > 6) kept.erase(kept.begin(), kept.end() - 6);
  return join(kept, " / ");
}

std::string line_with(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  size_t begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  size_t end = text.find('\n', at);
  return std::string(trim(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin)));
}

}  // namespace

std::vector<std::string> openssh_arguments(const SshOptions& options, const AgentTarget& target,
                                           const std::string& remote_command) {
  std::vector<std::string> argv{options.openssh_program.empty() ? "ssh" : options.openssh_program, "-T", "-o",
                                "BatchMode=yes"};
  auto option = [&](const std::string& text) {
    argv.push_back("-o");
    argv.push_back(text);
  };
  switch (options.host_key_policy) {
    case HostKeyPolicy::strict: option("StrictHostKeyChecking=yes"); break;
    case HostKeyPolicy::accept_new: option("StrictHostKeyChecking=accept-new"); break;
    case HostKeyPolicy::insecure:
      // Nothing known, nothing recorded: as the libssh2 client's insecure, no check at all.
      option("StrictHostKeyChecking=no");
      option("UserKnownHostsFile=/dev/null");
      option("GlobalKnownHostsFile=/dev/null");
      break;
  }
  if (!options.openssh_config.empty()) {
    argv.push_back("-F");
    argv.push_back(expand_home(options.openssh_config));
  }
  if (!options.known_hosts.empty() && options.host_key_policy != HostKeyPolicy::insecure) {
    option("UserKnownHostsFile=" + config_value(expand_home(options.known_hosts)));
  }
  int64_t seconds = std::max<int64_t>(1, (options.connect_timeout.count() + 999) / 1000);
  option("ConnectTimeout=" + std::to_string(seconds));
  // Only what the spec says: otherwise ssh_config (User, Port) decides, as for plain ssh.
  std::string user = target.user.empty() ? options.user : target.user;
  if (!user.empty()) {
    argv.push_back("-l");
    argv.push_back(user);
  }
  // AgentTarget's port is 22 unless a host entry named one ("host:2222").
  int port = target.port > 0 && target.port != 22 ? target.port : options.port;
  if (port > 0 && port != 22) {
    argv.push_back("-p");
    argv.push_back(std::to_string(port));
  }
  for (const std::string& identity : options.identity_files) {
    argv.push_back("-i");
    argv.push_back(expand_home(identity));
  }
  argv.push_back("--");  // a host named "-oProxyCommand=..." stays a host name
  argv.push_back(target.host);
  argv.push_back(remote_command);
  return argv;
}

std::string explain_openssh_failure(const std::string& host, const std::string& ssh_stderr,
                                    const SshOptions& options) {
  auto has = [&](const char* needle) { return ssh_stderr.find(needle) != std::string::npos; };
  std::string said = ssh_said(ssh_stderr);
  std::string quoted = said.empty() ? "nothing on stderr" : "'" + said + "'";
  std::string known_hosts = options.known_hosts.empty() ? "" : " -f " + shell_quote(expand_home(options.known_hosts));
  if (has("REMOTE HOST IDENTIFICATION HAS CHANGED") || has("has changed and you have requested strict checking")) {
    // "Offending ED25519 key in /home/u/.ssh/known_hosts:3": the file to fix.
    std::string offending = line_with(ssh_stderr, "Offending");
    size_t in = offending.find(" in ");
    size_t colon = offending.rfind(':');
    if (in != std::string::npos && colon != std::string::npos && colon > in + 4) {
      known_hosts = " -f " + shell_quote(offending.substr(in + 4, colon - in - 4));
    }
    return host + ": host key changed: OpenSSH refused it (" + (offending.empty() ? said : offending) +
           "); this may be an attack, or the host was reinstalled; refusing to connect; fix: if the change is "
           "expected, remove the old key (ssh-keygen -R " + shell_quote(host) + known_hosts + ") and connect again";
  }
  if (has("REVOKED")) {
    return host + ": host key revoked: OpenSSH says " + quoted + "; refusing to connect; fix: ask the host's "
           "administrator for its new key";
  }
  if (has("host key is known for") || has("Host key verification failed")) {
    return host + ": host key unknown or not verifiable: OpenSSH says " + quoted + " (ssh.host_key_policy: " +
           to_string(options.host_key_policy) + "); fix: check the fingerprint and add the key (ssh-keyscan " +
           shell_quote(host) + " >> KNOWN_HOSTS, or connect once with ssh), or trust the host's certificate "
           "authority with a @cert-authority line, or set ssh.host_key_policy: accept-new";
  }
  if (has("Permission denied")) {
    return host + ": authentication failed: OpenSSH says " + quoted + "; fix: authorize your public key on " + host +
           " (ssh-copy-id), load your key into ssh-agent (dtrain runs ssh with BatchMode=yes: no passphrase or "
           "password prompts), or set ssh.identity or IdentityFile in ssh_config";
  }
  if (has("Could not resolve hostname")) {
    return host + ": resolve: OpenSSH says " + quoted + "; fix: check the host name in the spec (and HostName in "
           "ssh_config, /etc/hosts or DNS on this machine)";
  }
  if (has("timed out") || has("No route to host") || has("Connection refused") || has("Network is unreachable") ||
      has("Connection closed by UNKNOWN") || has("kex_exchange_identification")) {
    return host + ": connect: OpenSSH says " + quoted + "; fix: is " + host +
           " up, running sshd and reachable from here (firewall, partition, ProxyJump host)?";
  }
  return host + ": ssh failed before the agent started: OpenSSH says " + quoted;
}

// ---------------------------------------------------------------------------------------------

class OpensshShared {
 public:
  explicit OpensshShared(SshOptions opts) : options(std::move(opts)), binary(options.local_binary) {
    if (options.version.empty()) options.version = kVersion;
    if (options.max_parallel < 1) options.max_parallel = 1;
  }
  const Clock& clock() const { return options.clock ? *options.clock : system_clock; }

  SshOptions options;
  AgentBinary binary;
  std::string os = local_os();
  SystemClock system_clock;
  int in_setup = 0;
};

OpensshConnection::OpensshConnection(std::shared_ptr<OpensshShared> shared, AgentTarget target)
    : shared_(std::move(shared)), target_(std::move(target)) {}

OpensshConnection::~OpensshConnection() { shutdown(0); }

int64_t OpensshConnection::now() const { return shared_->clock().monotonic_ms(); }

std::string OpensshConnection::describe() const {
  return target_.host + " (openssh" + (child_ ? " pid " + std::to_string(child_->pid()) : std::string()) + ")";
}

std::optional<pid_t> OpensshConnection::child_pid() const {
  if (!child_ || child_->reaped()) return std::nullopt;
  return child_->pid();
}

std::vector<pollfd> OpensshConnection::poll_fds() const {
  if (closed_ || !child_) return {};
  return child_->poll_fds();
}

bool OpensshConnection::spawn() {
  const SshOptions& options = shared_->options;
  if (shared_->in_setup >= options.max_parallel) return false;
  std::string command;
  if (!options.remote_command.empty()) {
    command = options.remote_command;
  } else {
    std::string path = !target_.dtrain_path.empty() ? target_.dtrain_path : options.remote_dtrain;
    std::string script;
    if (!path.empty()) {
      script = given_path_script(path, options);
    } else {
      if (Status loaded = shared_->binary.load(); !loaded) {
        close_with(target_.host + ": provisioning: " + loaded.error().message, true);
        return true;
      }
      script = provisioning_script(options, shared_->binary.sha256(), shared_->binary.contents()->size(), shared_->os);
    }
    // /bin/sh whatever the login shell is (csh, fish...); exec: the agent ends up as sshd's child.
    command = "exec /bin/sh -c " + shell_quote(script);
  }
  std::vector<std::string> argv = openssh_arguments(options, target_, command);
  std::string shown;
  for (size_t i = 0; i + 1 < argv.size(); ++i) shown += (i ? " " : "") + argv[i];
  info_.command_line = shown + " '...'";
  PipedChild::Options spawn_options;
  spawn_options.own_process_group = true;
  Result<PipedChild> started = PipedChild::spawn(argv, spawn_options);
  spawned_ms_ = now();
  if (!started) {
    close_with(target_.host + ": ssh.client is openssh, but " + started.error().message +
                   "; fix: install the OpenSSH client (openssh-client) or set ssh.client: libssh2",
               true);
    return true;
  }
  child_.emplace(std::move(*started));
  ++shared_->in_setup;
  counted_in_setup_ = true;
  deadline_ = spawned_ms_ + options.connect_timeout.count();
  if (!options.remote_command.empty()) mark_started("command", "");
  return true;
}

void OpensshConnection::pump() {
  if (closed_) return;
  if (!child_) {
    if (!spawn() || closed_) return;
  }
  child_->pump();
  keep_stderr(child_->take_stderr());
  if (started_) {
    received_ += child_->take_stdout();
  } else {
    preamble_ += child_->take_stdout();
    read_preamble();
  }
  if (closed_) return;
  if (!started_ && deadline_ >= 0 && now() >= deadline_) {
    const SshOptions& options = shared_->options;
    std::string said = ssh_said(stderr_tail_);
    if (upload_started_ms_ >= 0) {
      close_with(target_.host + ": provisioning: copying dtrain timed out after " +
                     format_duration(options.provision_timeout) + " (over openssh); fix: check the link to " +
                     target_.host + ", or install dtrain there and set ssh.remote_dtrain",
                 true);
    } else {
      close_with(target_.host + ": ssh (openssh) did not start the agent within " +
                     format_duration(options.connect_timeout) + (said.empty() ? "" : "; OpenSSH says '" + said + "'") +
                     "; fix: is " + target_.host + " up and reachable from here (firewall, partition, ProxyJump "
                     "host)? ssh.connect_timeout is " + format_duration(options.connect_timeout),
                 true);
    }
    return;
  }
  check_end();
}

void OpensshConnection::read_preamble() {
  size_t newline;
  while (!started_ && !closed_ && (newline = preamble_.find('\n')) != std::string::npos) {
    std::string line = preamble_.substr(0, newline);
    preamble_.erase(0, newline + 1);
    if (!starts_with(line, kMarker)) {
      // A login script that prints on a non-interactive shell would corrupt the protocol after
      // "start"; before it, the line is only worth a note.
      diagnostics_ += "dtrain: " + target_.host + ": the remote shell printed: " + line + "\n";
      continue;
    }
    std::string rest = line.substr(std::string(kMarker).size());
    size_t space = rest.find(' ');
    handle_line(rest.substr(0, space), space == std::string::npos ? "" : rest.substr(space + 1));
  }
}

void OpensshConnection::handle_line(const std::string& key, const std::string& value) {
  const SshOptions& options = shared_->options;
  if (key == "from") {
    info_.ssh_connection = value;
    std::string client = value.substr(0, value.find(' '));
    if (is_local_address(client)) local_address_ = client;
  } else if (key == "need") {
    upload_started_ms_ = now();
    deadline_ = now() + options.provision_timeout.count();
    child_->write(*shared_->binary.contents());
  } else if (key == "start") {
    size_t space = value.find(' ');
    mark_started(value.substr(0, space), space == std::string::npos ? "" : value.substr(space + 1));
  } else if (key == "os") {
    close_with(target_.host + ": provisioning: the host runs '" + value + "' but this dtrain is built for '" +
                   shared_->os + "', so it cannot be copied there; fix: install dtrain " + options.version + " on " +
                   target_.host + " and set ssh.remote_dtrain to its path",
               true);
  } else if (key == "home") {
    close_with(target_.host + ": provisioning: the remote $HOME is '" + value +
                   "', not an absolute path; fix: set ssh.remote_dtrain",
               true);
  } else if (key == "checksum") {
    close_with(target_.host + ": provisioning: the copy of dtrain arrived damaged (sha256 " + value + ", expected " +
                   shared_->binary.sha256() + "); fix: check the link to " + target_.host +
                   ", or install dtrain there and set ssh.remote_dtrain",
               true);
  }
}

void OpensshConnection::mark_started(const std::string& how, const std::string& path) {
  started_ = true;
  info_.started_ms = now() - spawned_ms_;
  info_.remote_dtrain = path;
  if (how == "copied") {
    info_.provisioning = "copied " + megabytes(shared_->binary.contents()->size()) + " in " +
                         format_duration(Millis(now() - upload_started_ms_));
  } else if (how == "PATH") {
    info_.provisioning = "in PATH";
  } else if (how != "command") {
    info_.provisioning = how;
  }
  if (counted_in_setup_) {
    --shared_->in_setup;
    counted_in_setup_ = false;
  }
  received_ += std::exchange(preamble_, {});
  if (!pending_input_.empty()) child_->write(std::exchange(pending_input_, {}));
  if (input_closed_) child_->close_input();
}

void OpensshConnection::keep_stderr(const std::string& bytes) {
  if (bytes.empty()) return;
  // Before the agent runs, stderr is ssh's (and the script's): kept for the close reason. After,
  // it is the agent's diagnostics, and ssh's last words when the connection drops.
  if (started_) diagnostics_ += bytes;
  stderr_tail_ += bytes;
  if (stderr_tail_.size() > kStderrKept) stderr_tail_.erase(0, stderr_tail_.size() - kStderrKept);
}

std::optional<int> OpensshConnection::exit_code() const {
  if (!child_) return std::nullopt;
  std::optional<int> status = child_->wait_status();
  if (!status) return std::nullopt;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

void OpensshConnection::check_end() {
  if (!child_->stdout_closed()) return;
  if (!child_->reaped() && now() - child_->stdout_closed_ms() < kExitAfterEofMs) return;
  keep_stderr(child_->take_stderr());
  std::optional<int> status = child_->wait_status();
  // A bare command (remote_command) "starts" with ssh itself; its exit code 255 is ssh's own.
  bool bare_command_failed = !shared_->options.remote_command.empty() && status && WIFEXITED(*status) &&
                             WEXITSTATUS(*status) == 255;
  if (!started_ || bare_command_failed) {
    std::string how = status ? " (ssh " + PipedChild::describe_status(*status) + ")" : "";
    close_with(explain_openssh_failure(target_.host, stderr_tail_, shared_->options) + how, true);
    return;
  }
  if (!status) {
    close_with(target_.host + ": the agent closed its output (ssh pid " + std::to_string(child_->pid()) +
                   " still running)",
               false);
    return;
  }
  if (WIFSIGNALED(*status)) {
    close_with(target_.host + ": ssh " + PipedChild::describe_status(*status), false);
    return;
  }
  int code = WEXITSTATUS(*status);
  if (code == 255) {
    std::string said = ssh_said(stderr_tail_);
    close_with(target_.host + ": ssh connection lost (ssh exited with code 255" +
                   (said.empty() ? std::string(")") : ": '" + said + "')"),
               false);
    return;
  }
  std::string hint;
  if (code == 127 && !info_.remote_dtrain.empty()) {
    hint = " (" + info_.remote_dtrain + " not found on the host; fix: correct ssh.remote_dtrain, or leave it empty "
           "so that dtrain copies itself there)";
  } else if (code == 126 && !info_.remote_dtrain.empty()) {
    hint = " (" + info_.remote_dtrain + " is not executable on the host)";
  }
  close_with(target_.host + ": remote command exited with code " + std::to_string(code) + hint, false);
}

void OpensshConnection::send(std::string bytes) {
  if (closed_) return;
  if (started_) child_->write(std::move(bytes));
  else if (!input_closed_) pending_input_ += bytes;
}

void OpensshConnection::close_input() {
  input_closed_ = true;
  if (started_ && child_) child_->close_input();
}

void OpensshConnection::close_with(std::string reason, bool failure) {
  if (closed_) return;
  closed_ = true;
  failed_ = failure;
  close_reason_ = std::move(reason);
  if (counted_in_setup_) {
    --shared_->in_setup;
    counted_in_setup_ = false;
  }
  if (child_) {
    child_->terminate(0);  // its process group too: a ProxyJump ssh ends with it
    if (started_) {
      received_ += child_->take_stdout();
      diagnostics_ += child_->take_stderr();
    }
  }
}

void OpensshConnection::shutdown(int grace_ms) {
  if (closed_) return;
  if (!child_) {
    close_with(target_.host + ": connection shut down by dtrain", false);
    return;
  }
  close_input();
  int64_t until = now() + std::max(0, grace_ms);
  while (!closed_) {
    pump();
    if (closed_) break;
    int64_t left = until - now();
    if (left <= 0) break;
    std::vector<pollfd> fds = poll_fds();
    if (fds.empty()) ::usleep(10'000);
    else ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 50)));
  }
  close_with(target_.host + ": connection shut down by dtrain", false);
}

// ---------------------------------------------------------------------------------------------

OpensshTransport::OpensshTransport(SshOptions options) : shared_(std::make_shared<OpensshShared>(std::move(options))) {}
OpensshTransport::~OpensshTransport() = default;

Result<std::unique_ptr<OpensshConnection>> OpensshTransport::connect(const AgentTarget& target) {
  if (target.host.empty()) return Error::internal("OpensshTransport::connect: empty host");
  return std::make_unique<OpensshConnection>(shared_, target);
}

Result<std::unique_ptr<AgentConnection>> OpensshTransport::start_agent(const AgentTarget& target) {
  auto connection = connect(target);
  if (!connection) return connection.error();
  return std::unique_ptr<AgentConnection>(std::move(*connection));
}

}  // namespace dtrain::transport
