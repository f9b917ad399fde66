// The agent's loop: one thread, one poll(). Everything it waits on — the supervisor's frames,
// signals (through a signalfd), worker output pipes, the worker socket, timers — is an fd or a
// deadline here, so a kill in progress or a fence never stops the agent from answering.

#include "launcher/agent/agent.h"
#include "launcher/agent/agent_loop.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/agent/failure_sample.h"
#include "launcher/agent/flight_recorder.h"
#include "launcher/agent/host_facts.h"
#include "launcher/agent/kill_operation.h"
#include "launcher/agent/outbox.h"
#include "launcher/agent/worker_files.h"
#include "launcher/agent/process_tree.h"
#include "launcher/agent/resource_sampler.h"
#include "launcher/agent/stack_probe.h"
#include "launcher/agent/worker_process.h"
#include "launcher/agent/worker_socket.h"
#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/messages.h"
#include "launcher/proto/supervisor_messages.h"
#include "worker/contract/env.h"
#include "worker/contract/wire.h"

namespace dtrain::agent {
namespace detail {

using nlohmann::json;

constexpr int64_t kConfigTimeoutMs = 30'000;   // from start to the supervisor's config
constexpr int kNvidiaSmiTimeoutMs = 5'000;     // per nvidia-smi call at hello
constexpr int64_t kFenceGraceCapMs = 2'000;    // TERM → KILL when fencing
constexpr int64_t kLastWordsMs = 1'000;        // flushing bye before exit

Status Agent::install_signal_handling() {
  ::signal(SIGPIPE, SIG_IGN);  // a closed pipe is an EPIPE we handle, not a death
  ::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would make the kernel reap our workers
  // Children orphaned anywhere below us are reparented to us, so a kill can find them.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Error::infra("prctl(PR_SET_CHILD_SUBREAPER): " + errno_text(errno));
  }
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, sig);
  if (::sigprocmask(SIG_BLOCK, &signals, &old_mask_) != 0) {
    return Error::infra("sigprocmask: " + errno_text(errno));
  }
  signal_fd_.reset(::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_.valid()) return Error::infra("signalfd: " + errno_text(errno));
  // sshd does not signal a remote command when the client goes away; our parent dying does.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  return {};
}

int Agent::run() {
  started_ms_ = now_ms();
  if (Status status = install_signal_handling(); !status) {
    std::fprintf(stderr, "agent: %s\n", status.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  while (!done_) loop_once();
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  return to_int(exit_code_);
}

void Agent::loop_once() {
  int64_t now = now_ms();
  check_timers(now);
  reap_children();
  advance_kills(now);
  if (fence_kill_ && fence_kill_->advance(now, workers_)) return finish_fence(now);
  keep_standbys(now);
  poll_and_dispatch();
  out_.flush_some();
  if (out_.broken() && !fence_reason_) {
    channel_ended("the supervisor's channel is closed (output)", ExitCode::ok);
  }
}

int64_t Agent::next_wakeup_ms(int64_t now) const {
  int64_t wakeup = now + 1000;
  if (!config_) wakeup = std::min(wakeup, started_ms_ + kConfigTimeoutMs);
  if (config_ && !fence_reason_ && detached_since_ms_) {
    wakeup = std::min(wakeup, *detached_since_ms_ + reattach_ms_);
  } else if (config_ && !fence_reason_) {
    wakeup = std::min({wakeup, next_beat_ms_, last_frame_ms_ + config_->heartbeat_timeout_ms});
  }
  for (const KillOperation& kill : kills_) wakeup = std::min(wakeup, kill.next_check_ms(now));
  if (fence_kill_) wakeup = std::min(wakeup, fence_kill_->next_check_ms(now));
  if (standby_count() < standbys_.wanted) wakeup = std::min(wakeup, std::max(now, next_standby_start_ms()));
  if (relay_ && relay_->needs_periodic_pump()) wakeup = std::min(wakeup, last_relay_pump_ms_ + 100);
  return wakeup;
}

void Agent::poll_and_dispatch() {
  std::vector<pollfd> fds;
  std::vector<std::function<void(short)>> handlers;
  auto watch = [&](pollfd fd, std::function<void(short)> handler) {
    fds.push_back(fd);
    handlers.push_back(std::move(handler));
  };
  watch({signal_fd_.get(), POLLIN, 0}, [this](short) { read_signals(); });
  if (health_) watch({health_->ready_fd(), POLLIN, 0}, [this](short) { send_health_replies(); });
  if (input_open_) watch({input_fd_, POLLIN, 0}, [this](short) { read_input(); });
  if (out_.pending_bytes() > 0 && !out_.detached()) watch({out_.fd(), POLLOUT, 0}, [this](short) { out_.flush_some(); });
  if (attach_listener_.valid() && !fence_reason_) watch({attach_listener_.get(), POLLIN, 0}, [this](short) { accept_attach(); });
  if (relay_) {
    for (const pollfd& fd : relay_->poll_fds()) watch(fd, [this](short) { relay_ready_ = true; });
  }
  // Worker output and worker messages wait while the supervisor is behind on reading ours.
  bool take_input = out_.pending_bytes() < Outbox::kBacklogLimit;
  if (sockets_) {
    for (const pollfd& fd : sockets_->poll_fds(take_input)) {
      watch(fd, [this, fd = fd.fd](short revents) {
        if (!sockets_) return;
        sockets_->on_ready(fd, revents, worker_message_sink(), worker_problem_sink());
      });
    }
  }
  if (take_input) {
    for (const auto& [pid, worker] : workers_) {
      for (int fd : {worker->stdout_fd(), worker->stderr_fd()}) {
        if (fd < 0) continue;
        // Looked up again at dispatch: a reap earlier in this round may have removed it.
        watch({fd, POLLIN, 0}, [this, pid = pid, fd](short) {
          auto it = workers_.find(pid);
          if (it == workers_.end()) return;
          WorkerProcess& worker = *it->second;
          worker.read_output(fd, [&](const char* stream, std::string line) {
            if (worker.standby()) {
              // No rank's output: a standby's log lines would land in no rank's log, or a wrong one.
              std::fprintf(stderr, "%s: standby pid %d %s: %s\n", who().c_str(), static_cast<int>(pid), stream,
                           line.c_str());
              return;
            }
            out_.send(proto::WorkerLogLine{worker.gen(), worker.rank(), stream, std::move(line)});
          });
        });
      }
    }
  }
  int64_t now = now_ms();
  int timeout = static_cast<int>(std::clamp<int64_t>(next_wakeup_ms(now) - now, 0, 1000));
  int ready = ::poll(fds.data(), fds.size(), timeout);
  if (ready > 0) {  // else a timeout or EINTR: the next round looks at the clock
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) handlers[i](fds[i].revents);
    }
  }
  pump_relay(now_ms());
}

void Agent::check_timers(int64_t now) {
  if (fence_reason_) return;
  if (!config_) {
    if (now - started_ms_ >= kConfigTimeoutMs) {
      begin_fence("no config from the supervisor within " +
                      format_duration(Millis(kConfigTimeoutMs)), ExitCode::infra);
    }
    return;
  }
  if (detached_since_ms_) return check_detached(now);
  if (now - last_frame_ms_ >= config_->heartbeat_timeout_ms) {
    return channel_ended("supervisor silent for " + format_duration(Millis(config_->heartbeat_timeout_ms)),
                         ExitCode::infra);
  }
  if (now >= next_beat_ms_) {
    send_beat(now);
    next_beat_ms_ = now + config_->heartbeat_interval_ms;
  }
}

void Agent::read_input() {
  std::string chunk;
  bool would_block = false;
  Result<size_t> got = read_some(input_fd_, chunk, &would_block);
  if (got && would_block) return;
  if (!got || *got == 0) {
    input_open_ = false;
    std::string how = !got ? "a read error (" + got.error().message + ")"
                     : decoder_.buffered_bytes() > 0 ? "EOF in the middle of a frame"
                                                     : "EOF";
    return channel_ended("the supervisor closed the channel (stdin " + how + ")", got ? ExitCode::ok : ExitCode::infra);
  }
  decoder_.feed(chunk);
  while (input_open_ && !fence_reason_) {
    auto next = decoder_.next();
    if (!next) return protocol_error(next.error().message);
    if (!next->has_value()) return;
    last_frame_ms_ = now_ms();
    handle_frame(**next);
  }
}

void Agent::read_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    if (info.ssi_signo == SIGCHLD) continue;  // reap_children() runs every round
    if ((info.ssi_signo == SIGTERM || info.ssi_signo == SIGHUP) && parent_gone_once()) {
      channel_ended("the session's process ended (received " + signal_name(static_cast<int>(info.ssi_signo)) + ")",
                    ExitCode::ok);
      continue;
    }
    begin_fence("received " + signal_name(static_cast<int>(info.ssi_signo)),
                ExitCode::interrupted);
  }
  reap_children();
}

void Agent::reap_children() {
  // While the sampler thread runs nvidia-smi, waitpid(-1) could take its exit status: reap only
  // our workers then, by pid; orphans wait for the next round (milliseconds).
  std::unique_lock<std::shared_mutex> no_helper_child(helper_child_lock(), std::try_to_lock);
  // While relaying, the relay's ssh processes are ours too and their owners must reap them:
  // reap by pid then, the workers and this thread's other children (orphans reparented to us).
  const bool by_pid = !no_helper_child.owns_lock() || relay_;
  std::vector<pid_t> reapable;
  if (relay_) {
    reapable = reapable_children();
  } else if (by_pid) {
    for (const auto& [pid, worker] : workers_) reapable.push_back(pid);
  }
  size_t next_reapable = 0;
  bool reaped_any = false;
  for (;;) {
    int status = 0;
    pid_t pid = 0;
    if (!by_pid) {
      pid = ::waitpid(-1, &status, WNOHANG);
    } else {
      while (pid <= 0 && next_reapable < reapable.size()) pid = ::waitpid(reapable[next_reapable++], &status, WNOHANG);
    }
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;  // a reparented orphan: reaping it is all we owe it
    WorkerProcess& worker = *it->second;
    if (worker.standby()) {
      // Nobody's worker: not reported. Its last words go where its output went; a replacement
      // starts, but not in a tight loop when the program dies at once.
      worker.drain_output([&](const char* stream, std::string line) {
        std::fprintf(stderr, "%s: standby pid %d %s: %s\n", who().c_str(), static_cast<int>(pid), stream, line.c_str());
      });
      if (!worker.signalled_by_agent) {
        std::fprintf(stderr, "%s: standby pid %d exited before it was assigned a rank (%s)\n", who().c_str(),
                     static_cast<int>(pid), describe_wait_status(status).c_str());
      }
      if (sockets_) sockets_->forget_moves_of(pid);
      standby_not_before_ms_ = std::max(standby_not_before_ms_, last_standby_start_ms_ + kStandbyRestartMs);
      workers_.erase(it);
      continue;
    }
    // Every line the worker wrote is in its pipes and its socket now; they go out before its
    // exit: the signal is read before the sockets in a round, and a final beat that came after
    // the exit would find the run already ended (no recovery.completed for the last generation).
    if (sockets_) sockets_->drain_connections_of(pid, worker_message_sink(), worker_problem_sink());
    worker.drain_output([&](const char* stream, std::string line) {
      out_.send(proto::WorkerLogLine{worker.gen(), worker.rank(), stream, std::move(line)});
    });
    flush_held_beat(worker.gen(), worker.rank());  // its last step before its exit
    if (sockets_) sockets_->forget_moves_of(pid);
    beaten_.erase({worker.gen(), worker.rank()});
    proto::WorkerExitReport exit;
    set_wait_status(exit, status);
    exit.gen = worker.gen();
    exit.rank = worker.rank();
    exit.local_rank = worker.local_rank();
    exit.pid = pid;
    exit.agent_time_ms = agent_time_ms();
    exit.tail = worker.tail();
    exit.killed_by_agent = worker.signalled_by_agent;
    if (files_) {
      // The file its environment names: that of the generation it was spawned for, even when
      // gen_changed carried it over since.
      std::optional<proto::WorkerErrorRecord> error =
          take_error_record(files_->error_file(worker.spawn_gen(), worker.rank()), proto::kMaxErrorFileBytes);
      bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (error && failed) exit.error = std::move(*error);
    }
    remember_exit(exit);
    out_.send(exit);
    workers_.erase(it);
    reaped_any = true;
  }
  if (reaped_any) update_sampled_workers();
}

std::vector<pid_t> Agent::reapable_children() const {
  std::vector<pid_t> pids;
  for (const auto& [pid, worker] : workers_) pids.push_back(pid);
  std::vector<pid_t> relay_pids = relay_ ? relay_->own_pids() : std::vector<pid_t>{};
  // The main thread's children (Linux 3.5+, CONFIG_PROC_CHILDREN): orphans reparented to this
  // subreaper land there; a helper thread's child (nvidia-smi) is its own thread's.
  Result<std::string> listed = read_file("/proc/self/task/" + std::to_string(::getpid()) + "/children");
  for (const std::string& field : split(listed ? *listed : std::string(), ' ')) {
    pid_t pid = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
    if (pid <= 0 || workers_.count(pid)) continue;
    if (std::find(relay_pids.begin(), relay_pids.end(), pid) != relay_pids.end()) continue;
    pids.push_back(pid);
  }
  return pids;
}

void Agent::pump_relay(int64_t now) {
  if (!relay_) return;
  // Children's bytes wait while the supervisor is behind on reading ours, as workers' do; SSH
  // sessions still get their periodic pump (their deadlines), which reads too.
  bool periodic = relay_->needs_periodic_pump() && now - last_relay_pump_ms_ >= 100;
  if (!periodic && !(relay_ready_ && out_.pending_bytes() < Outbox::kBacklogLimit)) return;
  relay_ready_ = false;
  last_relay_pump_ms_ = now;
  relay_->pump(now);
}

void Agent::on(const proto::RelayOpenRequest& open) {
  if (!relay_) {
    relay_ = std::make_unique<Relay>(open.ssh, [this](proto::AgentMessage message) { out_.send(message); });
  }
  relay_->open(open.children);
  std::fprintf(stderr, "%s: relaying for %zu host%s\n", who().c_str(), relay_->children(),
               relay_->children() == 1 ? "" : "s");
}

void Agent::on(const proto::RelayToRequest& to) {
  if (!relay_) return out_.send(proto::RelayClosedReport{to.host, "relay_to before relay_open"});
  relay_->to(to.host, to.data);
}

void Agent::on(const proto::RelayFanoutRequest& fanout) {
  for (const std::string& host : fanout.hosts) {
    if (!relay_) {
      out_.send(proto::RelayClosedReport{host, "relay_fanout before relay_open"});
    } else {
      relay_->to(host, fanout.data);
    }
  }
}

void Agent::on(const proto::RelayCloseRequest& close) {
  if (relay_) relay_->close(close.host);
}

void Agent::update_sampled_workers() {
  if (!sampler_) return;
  std::vector<WatchedWorker> watched;
  for (const auto& [pid, worker] : workers_) {
    if (!worker->standby()) watched.push_back({worker->gen(), worker->rank(), pid});
  }
  sampler_->set_workers(std::move(watched));
}

void Agent::advance_kills(int64_t now) {
  for (size_t i = 0; i < kills_.size();) {
    if (kills_[i].advance(now, workers_)) {
      out_.send(kills_[i].released_message(now_ms()));
      kills_.erase(kills_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void Agent::handle_frame(const json& frame) {
  // The one place a supervisor's frame becomes a typed message.
  Result<proto::SupervisorMessage> message = proto::parse_supervisor_message(frame);
  if (!message) return protocol_error(message.error().message);
  if (!config_ && !std::holds_alternative<proto::AgentConfig>(*message) &&
      !std::holds_alternative<proto::AgentAttachRequest>(*message)) {
    return protocol_error(std::string("'") + proto::type_of(*message) +
                          "' before config; config (or attach) must be the first frame");
  }
  std::visit([this](const auto& typed) { on(typed); }, *message);
}

void Agent::on(const proto::AgentConfig& message) {
  if (config_) return protocol_error("a second config");
  if (message.protocol != proto::kProtocolVersion) {
    send_error({"agent speaks protocol " + std::to_string(proto::kProtocolVersion) + " (dtrain " + kVersion +
                "), the supervisor " + std::to_string(message.protocol) + "; install the same dtrain version"});
    return begin_fence("protocol version mismatch", ExitCode::infra);
  }
  if (message.heartbeat_interval_ms <= 0 || message.heartbeat_timeout_ms <= 0) {
    return protocol_error("config: heartbeat_interval_ms and heartbeat_timeout_ms must be > 0");
  }
  Config config{message.run_id, message.host, message.runtime_dir, message.heartbeat_interval_ms,
                message.heartbeat_timeout_ms, message.batch_beats};
  config_ = config;
  auto sockets = WorkerSocketServer::open(config.runtime_dir, config.host, who());
  if (!sockets) {
    send_error({sockets.error().message, "config"});
    return begin_fence(sockets.error().message, ExitCode::infra);
  }
  sockets_ = std::move(*sockets);
  open_worker_files();
  proto::AgentHello hello;
  hello.protocol = proto::kProtocolVersion;
  hello.version = kVersion;
  hello.host = config.host;
  hello.pid = ::getpid();
  hello.agent_time_ms = agent_time_ms();
  hello.socket = sockets_->path();
  std::string attach_note;
  if (message.reattach_ms.value_or(0) > 0) {
    attach_note = open_attach_socket(*message.reattach_ms);
    if (reattachable()) hello.attach_socket = attach_path_;
  }
  // The stack probe (bounded: the interpreter is killed past the request's timeout) runs while
  // nvidia-smi does, so on a GPU host it costs the hello next to nothing.
  std::future<proto::StackFingerprint> stack;
  if (message.stack) stack = std::async(std::launch::async, [request = *message.stack] { return probe_stack(request); });
  hello.facts = collect_host_facts(kNvidiaSmiTimeoutMs);
  if (stack.valid()) hello.stack = stack.get();
  out_.send(hello);
  // Said once, after hello (the supervisor records it as agent.error): the run goes on.
  if (!attach_note.empty()) {
    std::fprintf(stderr, "%s: warning: %s\n", who().c_str(), attach_note.c_str());
    send_error({attach_note, "reattach"});
  }
  if (std::string note = sockets_->runtime_dir_note(); !note.empty()) {
    std::fprintf(stderr, "%s: warning: %s\n", who().c_str(), note.c_str());
    send_error({note, "runtime_dir"});
  }
  if (!proc_shows_own_processes()) {
    std::string note =
        "/proc shows another pid namespace than this agent's (a container with the host's /proc mounted?): the "
        "agent signals its workers' process groups only, cannot find their daemonised descendants, and samples no "
        "per-process CPU or memory; give the container its own /proc";
    std::fprintf(stderr, "%s: warning: %s\n", who().c_str(), note.c_str());
    send_error({note, "proc"});
  }
  // The sampler starts after hello: facts ran nvidia-smi on this thread, unshared.
  sampler_ = std::make_unique<ResourceSampler>(HostSampler::Options{nvml_library_path(), kNvidiaSmiTimeoutMs},
                                               config.heartbeat_interval_ms);
  // config.health: the start report (id 0) follows hello; the supervisor waits for it before
  // the first generation. Off the loop: the beats below go on while it runs.
  if (message.health) {
    health_request_ = *message.health;
    queue_health_check(0, proto::health_moment::kStart, false);
  }
  // Gathering facts may take seconds (nvidia-smi); that is not the supervisor's silence.
  last_frame_ms_ = now_ms();
  next_beat_ms_ = last_frame_ms_ + config.heartbeat_interval_ms;
}

void Agent::on(const proto::KillRequest& kill) {
  std::set<int> ranks;  // empty: every worker of gen
  if (kill.ranks) ranks.insert(kill.ranks->begin(), kill.ranks->end());
  // A kill of every generation ends the standbys too (KillOperation covers them) and keeps the
  // pool empty until a spawn asks again, or the kill could never be done.
  if (kill.gen < 0) standbys_.wanted = 0;
  kills_.emplace_back(kill.gen, kill.signal == proto::KillSignal::kill ? SIGKILL : SIGTERM,
                      static_cast<int>(std::clamp<int64_t>(kill.grace_ms, 0, 3'600'000)), now_ms(),
                      std::move(ranks), moved_generations_);
}

// In-place recovery (messages.h gen_changed): the live workers of `from` carry on as members of
// `to`. Everything the agent keys by generation follows them; their environment cannot, which
// is why the error file is looked up by spawn_gen() and an orphan's DTRAIN_GENERATION through
// moved_generations_.
void Agent::on(const proto::HealthCheckRequest& request) {
  queue_health_check(request.id, request.moment, request.diagnose);
}

void Agent::queue_health_check(int64_t id, std::string moment, bool diagnose) {
  if (!health_) {
    // A request without config.health gets the built-in checks at their default limits.
    HealthEnvironment environment{sysfs_root_from_environment(), nvml_library_path(), {}, {}, -1};
    health_ = std::make_unique<HealthRunner>(health_request_.value_or(proto::HealthRequest{}), std::move(environment));
  }
  HealthJob job{id, std::move(moment), diagnose, sampler_ ? sampler_->take_xids_for_health() : std::vector<proto::XidEvent>{}, {}};
  for (const auto& [pid, worker] : workers_) job.workers.push_back(pid);
  health_->queue(std::move(job));
}

void Agent::send_health_replies() {
  if (!health_) return;
  for (proto::HealthReply& reply : health_->take_replies()) out_.send(reply);
}

void Agent::on(const proto::GenChangedRequest& change) {
  int from = change.from;
  int to = change.to;
  // A worker that has exited already is reported (as `from`) now, not carried over.
  reap_children();
  proto::GenChangedReply reply{change.id, from, to, {}, {}};
  for (auto& [pid, worker] : workers_) {
    if (worker->gen() != from) continue;
    // A worker being killed (the hung rank this recovery replaces) leaves as a member of `from`:
    // its exit and released must match the kill that was asked for.
    bool leaving = std::any_of(kills_.begin(), kills_.end(),
                               [&](const KillOperation& kill) { return kill.covers(from, worker->rank()); });
    if (leaving || worker->signalled_by_agent) continue;
    flush_held_beat(from, worker->rank());  // its last beat as `from`, before any as `to`
    // Not carried to `to`: its first beat there is news (recovery progress), so it goes at once.
    beaten_.erase({from, worker->rank()});
    worker->change_generation(to);
    sockets_->change_generation(from, to, worker->rank(), pid);
    reply.ranks.push_back(worker->rank());
    reply.pids.push_back(pid);
  }
  moved_generations_[from] = to;
  update_sampled_workers();
  out_.send(reply);
}

void Agent::on(const proto::PingRequest& ping) {
  out_.send(proto::Pong{ping.id, agent_time_ms(), ping.supervisor_time_ms});
}

void Agent::on(const proto::ToWorkerRequest& to_worker) {
  if (Status sent = sockets_->send_to(to_worker.gen, to_worker.rank, to_worker.msg); !sent) {
    send_error({sent.error().message, proto::msg::kToWorker, std::nullopt, to_worker.gen, to_worker.rank});
  }
}

void Agent::on(const proto::ReservePortRequest& reserve) {
  // Bound and released at once: the kernel will not hand out this ephemeral port again soon,
  // which is all MASTER_PORT needs (rank 0 binds it moments later).
  UniqueFd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof address;
  if (!probe.valid() ||
      ::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    send_error({"cannot find a free TCP port: " + errno_text(errno), proto::msg::kReservePort, reserve.id});
    return;
  }
  out_.send(proto::PortReply{reserve.id.value_or(0), ntohs(address.sin_port)});
}

void Agent::on(const proto::FenceRequest& fence) {
  begin_fence("the supervisor asked to fence (" + fence.reason.value_or("no reason given") + ")", ExitCode::ok);
}

void Agent::on(const proto::SampleRequest& sample) {
  int gen = sample.gen;
  int rank = sample.rank;
  int64_t pid = sample.pid;
  proto::SampleReply reply{sample.id, gen, rank, pid, std::nullopt, std::nullopt};
  // Only our own live workers: the supervisor must not be able to point gdb at any process of
  // this user on this host, and a pid that has exited may already belong to someone else.
  auto worker = pid > 0 ? workers_.find(static_cast<pid_t>(pid)) : workers_.end();
  std::optional<char> state = worker == workers_.end() ? std::nullopt : process_state(worker->first);
  std::string where = "rank " + std::to_string(rank) + " of generation " + std::to_string(gen) +
                      " on " + config_->host;
  if (worker == workers_.end() || worker->second->gen() != gen || worker->second->rank() != rank) {
    reply.error = "sample: pid " + std::to_string(pid) + " is not " + where +
                     " (not a live worker of this agent; did it exit?); nothing sampled";
  } else if (!state || *state == 'Z') {
    reply.error = "sample: " + where + " (pid " + std::to_string(pid) +
                     ") has exited; nothing to sample";
  } else {
    // The loop is blocked while gdb runs: at most half the silence that would make us fence.
    int64_t cap = std::max<int64_t>(config_->heartbeat_timeout_ms / 2, 0);
    Millis gdb_timeout(std::clamp<int64_t>(sample.timeout_ms, 0, cap));
    reply.text = capture_local_sample(static_cast<int>(pid), gdb_timeout, proto::kMaxSampleTextBytes);
  }
  out_.send(reply);
  // A beat right after: several samples in a row must not look like a silent agent.
  int64_t now = now_ms();
  send_beat(now);
  next_beat_ms_ = now + config_->heartbeat_interval_ms;
  out_.flush_some();
}

void Agent::on(const proto::DumpRequest& dump) {
  int gen = dump.gen;
  std::vector<DumpTarget> targets;
  for (const auto& [pid, worker] : workers_) {
    std::optional<char> state = process_state(pid);
    if (worker->gen() == gen && state && *state != 'Z') {
      targets.push_back({gen, worker->rank(), pid, assigned_dump_paths(worker->assigned_env())});
    }
  }
  // The loop waits here, like a sample: at most half the silence that would make us fence.
  int64_t cap = std::max<int64_t>(config_->heartbeat_timeout_ms / 2, 0);
  Millis timeout(std::clamp<int64_t>(dump.timeout_ms, 0, cap));
  std::string owned = files_ ? files_->directory() : "";
  for (proto::FlightRecorderDump& reply : collect_flight_recorder_dumps(targets, timeout, proto::kMaxDumpBytes, owned)) {
    reply.id = dump.id;
    out_.send(reply);
  }
  int64_t now = now_ms();
  send_beat(now);
  next_beat_ms_ = now + config_->heartbeat_interval_ms;
  out_.flush_some();
}

void Agent::forward_from_worker(int gen, int rank, pid_t pid, proto::WorkerMessage message) {
  std::pair<int, int> key{gen, rank};
  const auto* beat = std::get_if<proto::WorkerBeat>(&message);
  if (beat && config_ && config_->batch_beats && !beat->phase && beaten_.count(key)) {
    held_beats_[key] = {pid, *beat};
    return;
  }
  flush_held_beat(gen, rank);
  if (beat) beaten_.insert(key);
  out_.send(proto::FromWorker{gen, rank, pid, std::move(message)});
}

WorkerMessageSink Agent::worker_message_sink() {
  return [this](int gen, int rank, pid_t peer_pid, proto::WorkerMessage message) {
    forward_from_worker(gen, rank, peer_pid, std::move(message));
  };
}

WorkerProblemSink Agent::worker_problem_sink() {
  return [this](const WorkerLineProblem& problem) { report_worker_line_problem(problem); };
}

void Agent::report_worker_line_problem(const WorkerLineProblem& problem) {
  out_.send(proto::WorkerProtocolError{problem.gen, problem.rank, problem.peer_pid, problem.error, problem.closed});
}

void Agent::flush_held_beat(int gen, int rank) {
  auto held = held_beats_.find({gen, rank});
  if (held == held_beats_.end()) return;
  out_.send(proto::FromWorker{gen, rank, held->second.first, proto::WorkerMessage(held->second.second)});
  held_beats_.erase(held);
}

void Agent::send_beat(int64_t) {
  proto::AgentBeat beat;
  for (const auto& [pid, worker] : workers_) {
    if (worker->standby()) continue;
    std::optional<char> state = process_state(pid);
    // Only the workers that need attention (messages.h): running ones make the beat no longer.
    if (state && (*state == 'R' || *state == 'S' || *state == 'D' || *state == 'I')) continue;
    beat.workers.push_back({worker->gen(), worker->rank(), pid, state.has_value() && *state != 'Z',
                            std::string(1, state.value_or('?'))});
  }
  beat.agent_time_ms = agent_time_ms();
  beat.load1 = load_average_1m();
  beat.mem_available_mb = memory_available_mb();
  beat.worker_beats.reserve(held_beats_.size());
  for (auto& [key, held] : held_beats_) {
    beat.worker_beats.push_back({key.first, key.second, held.first, proto::WorkerMessage(std::move(held.second))});
  }
  held_beats_.clear();
  if (sampler_) beat.resources = sampler_->take();
  out_.send(beat);
}

void Agent::send_error(proto::AgentError error) { out_.send(error); }

void Agent::protocol_error(const std::string& what) {
  std::fprintf(stderr, "%s: protocol error from the supervisor: %s\n", who().c_str(), what.c_str());
  send_error({"protocol error: " + what});
  input_open_ = false;  // a stream that lost its framing cannot be trusted further
  begin_fence("protocol error from the supervisor: " + what, ExitCode::infra);
}

void Agent::begin_fence(std::string reason, ExitCode code) {
  if (fence_reason_) return;
  fence_reason_ = std::move(reason);
  exit_code_ = code;
  input_open_ = false;
  workers_at_fence_ = workers_.size() - static_cast<size_t>(standby_count());
  int64_t grace = config_ ? std::min(kFenceGraceCapMs, config_->heartbeat_timeout_ms)
                          : kFenceGraceCapMs;
  fence_kill_.emplace(-1, SIGTERM, static_cast<int>(grace), now_ms());
}

void Agent::finish_fence(int64_t now) {
  advance_kills(now);  // pending kills are complete too now: answer them
  size_t processes = fence_kill_->killed_count();
  std::string summary = "killed " + std::to_string(workers_at_fence_) + " worker" +
                        (workers_at_fence_ == 1 ? "" : "s");
  if (processes > workers_at_fence_) {
    summary += " (" + std::to_string(processes) + " processes)";
  }
  proto::Released released = fence_kill_->released_message(now);
  if (released.remaining != 0) {
    summary += "; could not kill " + json(released.remaining_pids).dump();
  }
  std::fprintf(stderr, "%s: %s; fencing: %s\n", who().c_str(), fence_reason_->c_str(),
               summary.c_str());
  out_.send(proto::AgentBye{*fence_reason_, released.killed});
  out_.flush_until(now_ms() + kLastWordsMs);
  // The relayed hosts' agents fence when their input closes; a second for them to go (their own
  // fence kills their workers whether or not we wait).
  if (relay_) relay_->shutdown(1000);
  health_.reset();   // stops its thread: a site command is killed; a hung one is left behind (bounded wait)
  sampler_.reset();  // joins its thread (a running nvidia-smi is bounded by kNvidiaSmiTimeoutMs)
  files_.reset();    // before the socket: the runtime dir is removed once it is empty
  close_attach_socket();
  channel_.reset();
  sockets_.reset();  // removes the socket and the runtime dir
  done_ = true;
}

}  // namespace detail

int run_agent(int input_fd, int output_fd) {
  detail::Agent agent(input_fd, output_fd);
  return agent.run();
}

}  // namespace dtrain::agent
