#include "launcher/transport/kubectl_provision.h"

#include <algorithm>
#include <sys/wait.h>

#include <chrono>

#include "launcher/base/strings.h"

namespace dtrain::transport {
namespace {

int64_t monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// The probe prints three short lines and the copy one; more is not an answer.
constexpr size_t kMaxAnswerBytes = 16 * 1024;
constexpr size_t kStderrTailBytes = 2048;
// After a step's output ended, how long kubectl may take to exit (as KubectlConnection waits).
constexpr int64_t kExitAfterEofMs = 1000;

bool is_sha256(const std::string& text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_printable(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= ' ' && c != '\x7f'; });
}

std::string value_of(const std::string& output, const std::string& key, bool* found) {
  for (const std::string& line : split(output, '\n')) {
    if (line == key || starts_with(line, key + " ")) {
      *found = true;
      return line.size() > key.size() ? line.substr(key.size() + 1) : std::string();
    }
  }
  *found = false;
  return {};
}

std::string what_kubectl_said(const std::string& err) { return printable(std::string(trim(err)), 600); }

}  // namespace

std::string pod_probe_script(const std::string& version) {
  // The first candidate that can be made and written, and is ours, is the cache: /tmp is shared
  // by every user of the pod, and a directory someone else made there could swap the binary.
  // "sha": only for an executable copy; none when the pod has no sha256sum (never trusted then).
  return "v=" + shell_quote(version) + "; d=\n"
         "for b in ${HOME:+\"$HOME/.cache/dtrain\"} \"/tmp/dtrain-$(id -u 2>/dev/null || echo 0)\"; do\n"
         "  case \"$b\" in /?*) ;; *) continue ;; esac\n"
         "  (umask 077 && mkdir -p \"$b/$v\") 2>/dev/null && [ -w \"$b/$v\" ] && [ -O \"$b/$v\" ] && { d=\"$b/$v\"; break; }\n"
         "done\n"
         "printf 'os %s %s\\ndir %s\\n' \"$(uname -s)\" \"$(uname -m)\" \"$d\"\n"
         "[ -n \"$d\" ] && [ -x \"$d/dtrain\" ] && printf 'sha %s\\n' \"$(sha256sum < \"$d/dtrain\" 2>/dev/null | cut -c1-64)\"\n"
         "exit 0\n";
}

Result<PodProbe> parse_pod_probe(const std::string& output) {
  if (output.size() > kMaxAnswerBytes) return Error::infra("the probe printed " + std::to_string(output.size()) + " bytes, not its three lines");
  PodProbe probe;
  bool found = false;
  probe.os = value_of(output, "os", &found);
  if (!found || probe.os.empty() || probe.os.size() > 100 || !is_printable(probe.os)) {
    return Error::infra("the probe printed no 'os' line (is there a /bin/sh in the container?)");
  }
  probe.cache_dir = value_of(output, "dir", &found);
  if (!found) return Error::infra("the probe printed no 'dir' line");
  if (!probe.cache_dir.empty() &&
      (probe.cache_dir[0] != '/' || probe.cache_dir.size() > 4096 || !is_printable(probe.cache_dir))) {
    return Error::infra("the probe's cache directory '" + printable(probe.cache_dir, 200) + "' is not an absolute path");
  }
  std::string sha = value_of(output, "sha", &found);
  // "sha " without a sum: the copy is there but sha256sum is not; it is not trusted.
  if (found && !sha.empty()) {
    if (!is_sha256(sha)) return Error::infra("the probe's sha256 '" + printable(sha, 80) + "' is not 64 hex digits");
    probe.cached_sha256 = sha;
  }
  return probe;
}

std::string pod_upload_script(const std::string& cache_dir, size_t size, const std::string& sha256) {
  // head -c: exactly the binary's bytes, whether or not the exec protocol passes on stdin's EOF.
  return "set -e; umask 077; d=" + shell_quote(cache_dir) +
         "; t=\"$d/dtrain.tmp.$$\"; trap 'rm -f \"$t\"' EXIT\n"
         "{ command -v sha256sum && command -v cut && command -v head; } >/dev/null 2>&1 || { echo 'no sha256sum, cut or head in the container to copy and check dtrain with' >&2; exit 4; }\n"
         "head -c " + std::to_string(size) + " > \"$t\"\n"
         "got=$(sha256sum < \"$t\" | cut -c1-64)\n"
         "if [ \"$got\" != '" + sha256 + "' ]; then echo \"checksum mismatch after copy (got $got)\" >&2; exit 3; fi\n"
         "chmod 0755 \"$t\"; mv -f \"$t\" \"$d/dtrain\"; trap - EXIT; echo \"ok $got\"\n";
}

std::optional<std::string> read_upload_answer(const std::string& output) {
  std::string line(trim(output));
  if (!starts_with(line, "ok ")) return std::nullopt;
  std::string sha = line.substr(3);
  if (!is_sha256(sha)) return std::nullopt;
  return sha;
}

Result<ProvisionDecision> decide_provisioning(const PodProbe& probe, const std::string& local_os,
                                              const std::string& sha256, const std::string& pod) {
  if (probe.cache_dir.empty()) {
    return Error::user(pod + ": provisioning: no directory in the container to copy dtrain to ($HOME/.cache/dtrain "
                             "and /tmp/dtrain-UID cannot be made or written); fix: put dtrain in the image and set "
                             "ssh.remote_dtrain to its path");
  }
  std::string path = probe.cache_dir + "/dtrain";
  if (!probe.cached_sha256.empty() && probe.cached_sha256 == sha256) return ProvisionDecision{false, path};
  if (probe.os != local_os) {
    return Error::user(pod + ": provisioning: the container runs '" + printable(probe.os, 100) +
                       "' but this dtrain is built for '" + local_os +
                       "', so it cannot be copied there; fix: put dtrain in the image and set ssh.remote_dtrain to its path");
  }
  return ProvisionDecision{true, path};
}

// ---- the connection ---------------------------------------------------------------------------

Result<std::unique_ptr<AgentConnection>> KubectlProvisioningConnection::start(
    std::string pod, KubectlOptions options, std::shared_ptr<KubectlProvisioning> shared) {
  std::unique_ptr<KubectlProvisioningConnection> connection(
      new KubectlProvisioningConnection(std::move(pod), std::move(options), std::move(shared)));
  Status started = connection->start_step(Step::probe, pod_probe_script(connection->shared_->version),
                                          connection->options_.start_timeout_ms);
  if (!started) return started.error();
  connection->child_->close_input();  // the probe reads nothing
  return std::unique_ptr<AgentConnection>(std::move(connection));
}

KubectlProvisioningConnection::~KubectlProvisioningConnection() {
  if (child_) child_->terminate(0);
}

Status KubectlProvisioningConnection::start_step(Step step, const std::string& script, int timeout_ms) {
  std::vector<std::string> argv = kubectl_exec_argv(options_, pod_, {"/bin/sh", "-c", script});
  child_.reset();
  Result<PipedChild> child = PipedChild::spawn(argv, {.own_process_group = true, .kill_with_parent = true});
  if (!child) {
    return Error::user(pod_ + ": " + child.error().message + "; install kubectl or set kubernetes.kubectl to its path");
  }
  child_.emplace(std::move(child).value());
  step_ = step;
  out_.clear();
  err_.clear();
  deadline_ms_ = monotonic_ms() + timeout_ms;
  return {};
}

std::vector<pollfd> KubectlProvisioningConnection::poll_fds() const {
  if (agent_) return agent_->poll_fds();
  return child_ ? child_->poll_fds() : std::vector<pollfd>{};
}

void KubectlProvisioningConnection::pump() {
  if (agent_) {
    agent_->pump();
    return;
  }
  if (failed_ || !child_) return;
  child_->pump();
  out_ += child_->take_stdout();
  err_ += child_->take_stderr();
  if (err_.size() > kStderrTailBytes) err_.erase(0, err_.size() - kStderrTailBytes);
  const char* what = step_ == Step::probe ? "the provisioning probe" : "copying dtrain";
  if (out_.size() > kMaxAnswerBytes) {
    fail(pod_ + ": provisioning: " + what + " printed more than an answer; fix: set ssh.remote_dtrain");
    return;
  }
  if (monotonic_ms() >= deadline_ms_) {
    int seconds = (step_ == Step::probe ? options_.start_timeout_ms : options_.provision_timeout_ms) / 1000;
    fail(pod_ + ": provisioning: " + what + " through kubectl exec took over " + std::to_string(seconds) + " s" +
         (err_.empty() ? "" : " (" + what_kubectl_said(err_) + ")"));
    return;
  }
  if (!child_->stdout_closed()) return;
  if (!child_->reaped() && monotonic_ms() - child_->stdout_closed_ms() < kExitAfterEofMs) return;
  std::optional<int> status = child_->wait_status();
  int exit_code = status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  if (step_ == Step::probe) finish_probe(exit_code);
  else finish_upload(exit_code);
}

void KubectlProvisioningConnection::finish_probe(int exit_code) {
  if (exit_code != 0) {
    fail(explain_kubectl_failure("kubectl exec into pod " + pod_ + " (provisioning probe)", err_, options_) +
         "; to use a dtrain the image holds instead, set ssh.remote_dtrain to its path");
    return;
  }
  Result<PodProbe> probe = parse_pod_probe(out_);
  if (!probe) {
    fail(pod_ + ": provisioning: " + probe.error().message + "; fix: set ssh.remote_dtrain to the path of dtrain in the image");
    return;
  }
  Status loaded = shared_->binary.load();
  if (!loaded) {
    fail(pod_ + ": provisioning: " + loaded.error().message);
    return;
  }
  Result<ProvisionDecision> decision = decide_provisioning(*probe, shared_->os, shared_->binary.sha256(), pod_);
  if (!decision) {
    fail(decision.error().message);
    return;
  }
  if (!decision->copy) {
    diagnostics_ += "dtrain: " + pod_ + ": provisioning: cached copy " + decision->path + " (sha256 " +
                    shared_->binary.sha256() + ")\n";
    start_agent(decision->path);
    return;
  }
  if (!probe->cached_sha256.empty()) {
    diagnostics_ += "dtrain: " + pod_ + ": " + decision->path + " has sha256 " + probe->cached_sha256 +
                    ", not this binary's; copying this binary over it\n";
  }
  const std::string& contents = *shared_->binary.contents();
  Status started = start_step(Step::upload, pod_upload_script(probe->cache_dir, contents.size(), shared_->binary.sha256()),
                              options_.provision_timeout_ms);
  if (!started) {
    fail(started.error().message);
    return;
  }
  upload_path_ = decision->path;
  upload_started_ms_ = monotonic_ms();
  child_->write(contents);
}

void KubectlProvisioningConnection::finish_upload(int exit_code) {
  std::optional<std::string> sha = read_upload_answer(out_);
  const std::string& wanted = shared_->binary.sha256();
  if (exit_code == 3 || (sha && *sha != wanted)) {
    fail(pod_ + ": provisioning: the copy of dtrain at " + upload_path_ + " has a different sha256 than this binary (" +
         wanted + "): " + (sha ? "the pod computed " + *sha : what_kubectl_said(err_)) +
         "; the bytes were changed on the way; it is not used");
    return;
  }
  if (exit_code != 0 || !sha) {
    fail(explain_kubectl_failure("kubectl exec into pod " + pod_ + " (copying dtrain to " + upload_path_ + ")", err_, options_) +
         "; fix: make $HOME or /tmp in the container writable, or put dtrain in the image and set ssh.remote_dtrain");
    return;
  }
  diagnostics_ += "dtrain: " + pod_ + ": provisioning: copied " + megabytes(shared_->binary.contents()->size()) +
                  " to " + upload_path_ + " in " + format_duration(Millis(monotonic_ms() - upload_started_ms_)) +
                  ", sha256 " + *sha + " checked\n";
  start_agent(upload_path_);
}

void KubectlProvisioningConnection::start_agent(const std::string& path) {
  child_.reset();
  Result<std::unique_ptr<AgentConnection>> agent = start_kubectl_agent(options_, pod_, path);
  if (!agent) {
    fail(agent.error().message);
    return;
  }
  agent_ = std::move(*agent);
  if (!pending_input_.empty()) agent_->send(std::exchange(pending_input_, {}));
  if (input_closed_) agent_->close_input();
}

void KubectlProvisioningConnection::fail(const std::string& reason) {
  failed_ = true;
  close_reason_ = reason;
  if (child_) child_->terminate(0);
}

void KubectlProvisioningConnection::send(std::string bytes) {
  if (agent_) agent_->send(std::move(bytes));
  else if (!input_closed_) pending_input_ += bytes;
}

std::string KubectlProvisioningConnection::take_diagnostics() {
  std::string text = std::exchange(diagnostics_, {});
  if (agent_) text += agent_->take_diagnostics();
  return text;
}

void KubectlProvisioningConnection::close_input() {
  if (agent_) agent_->close_input();
  input_closed_ = true;
}

void KubectlProvisioningConnection::shutdown(int grace_ms) {
  if (agent_) {
    agent_->shutdown(grace_ms);
    return;
  }
  if (!failed_) fail("agent connection shut down while provisioning dtrain in pod " + pod_);
}

std::string KubectlProvisioningConnection::describe() const {
  if (agent_) return agent_->describe();
  return pod_ + " (kubectl exec: " + (step_ == Step::probe ? "provisioning probe" : "copying dtrain") + ")";
}

}  // namespace dtrain::transport
