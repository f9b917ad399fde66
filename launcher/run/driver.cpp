// RunDriver's loop: waiting on every agent link, the signal pipe and the control socket;
// pumping what is ready; silences, pings and the supervisor's clock tick; each Action handed to
// the part that carries it out. See driver.h for the other parts.

#include "launcher/run/driver.h"
#include "launcher/run/quarantine_gate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>
#include <thread>
#include <unordered_map>

#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/base/open_files.h"
#include "launcher/hosts/kubernetes_hosts.h"
#include "launcher/proto/messages.h"
#include "launcher/run/fd_watcher.h"
#include "launcher/run/health_request.h"
#include "launcher/run/run_summary.h"
#include "launcher/run/signal_pipe.h"
#include "launcher/run/worker_env.h"
#include "launcher/events/events.h"

namespace dtrain::run {

namespace {

using supervisor::RunState;

}  // namespace

RunDriver::RunDriver(spec::JobSpec spec, plan::RankPlan plan, RunDirectory run, EventLog events, std::string dtrain_exe,
                     bool detached, Console console, const DriverSeams& seams)
    : clock_(seams.clock ? *seams.clock : system_clock_),
      spec_(std::move(spec)),
      run_(std::move(run)),
      recorder_(run_, std::move(events), console, clock_, seams.before_runlog_write, spec_.logs.max_bytes),
      supervisor_(spec_, plan, clock_),
      transports_(spec_, std::move(dtrain_exe), seams.transport,
                  [this](const std::string& warning) {
                    record(events::SshInsecure{warning}.to_json());
                    recorder_.console_line("warning: " + warning);
                  }),
      times_{clock_.wall_ms(), std::nullopt},
      watch_pods_(spec_.transport == spec::TransportKind::kubectl && seams.transport == nullptr),
      relay_over_transport_(seams.transport != nullptr && seams.relay_over_transport),
      launcher_(*this, spec_, run_, supervisor_, store_, progress_, links_, clock_, this_hostname()),
      snapshots_(spec_, run_, supervisor_, progress_, links_, router_, metrics_, times_, recorder_, clock_,
                 this_hostname(), detached) {}

void RunDriver::resume_from(const supervisor::ResumeFrom& from, int64_t submitted_wall_ms) {
  times_.submitted_wall_ms = submitted_wall_ms;
  times_.resumed_wall_ms = clock_.wall_ms();
  pending_resume_ = from;
  router_.set_last_checkpoint_step(from.committed_steps.empty() ? -1 : from.committed_steps.back());
}

// ---- setup / teardown ---------------------------------------------------------------------------

void RunDriver::start_agents() {
  std::vector<spec::HostEntry> hosts = spec_.hosts;
  hosts.insert(hosts.end(), spec_.spares.begin(), spec_.spares.end());
  // A host the first plan does without (quarantined in the registry) gets no agent: nothing of
  // this run touches it, and no plan of this run takes it back.
  std::erase_if(hosts, [this](const spec::HostEntry& host) { return supervisor_.excluded_hosts().count(host.name) > 0; });
  relay_tree_ = plan_run_relay_tree(hosts);
  // Relayed hosts start once their relay said hello (agent_connected); a relay lost before that
  // costs only itself: its hosts are reached directly (start_orphans_directly).
  for (const spec::HostEntry& host : hosts) {
    if (relay_tree_.relay_of.count(host.name)) {
      waiting_for_relay_.push_back(host);
    } else {
      start_agent(host);
    }
  }
}

void RunDriver::start_agent(const spec::HostEntry& host) {
  Result<std::unique_ptr<transport::AgentConnection>> connection = connect_agent(host);
  if (!connection) {
    record(events::HostFailed{host.name, connection.error().message}.to_json());
    feed(supervisor::HostLost{host.name, connection.error().message});
    return;
  }
  // A frame too large for the agent is not sent (it would cost the host); the bug is recorded.
  auto refused = [this, name = host.name](const Error& error) {
    log().error("{}", error.message);
    record(events::AgentError{name, error.message}.to_json());
  };
  auto link = std::make_unique<AgentLink>(host.name, std::move(connection).value(),
                                          clock_.monotonic_ms(), clock_.wall_ms(), refused);
  if (auto relay = relay_tree_.relay_of.find(host.name); relay != relay_tree_.relay_of.end()) link->relayed_by = relay->second;
  send_config(*link);
  log().info("host {}: starting agent ({})", host.name, link->connection().describe());
  if (auto relayed = relayed_.find(host.name); relayed != relayed_.end()) relayed->second.link = link.get();
  links_[host.name] = std::move(link);
  links_added_ = true;
}

void RunDriver::send_config(AgentLink& link) {
  proto::AgentConfig config{proto::kProtocolVersion, run_.id(), link.host(), runtime_dir_.directory.path(),
                            spec_.heartbeat.interval.count(), spec_.heartbeat.timeout.count(),
                            clock_.wall_ms(), /*batch_beats=*/true};
  config.stack = stack_probe_request(spec_);
  // Where the workers will write checkpoints: the agent's checks write and fsync a probe there.
  config.health = health_request(spec_, spec_.checkpoint.dir.empty() ? run_.path() + "/checkpoints" : spec_.checkpoint.dir);
  link.health_requested = config.health.has_value();
  // A relayed host's relay may be lost through no fault of its own: it keeps its workers for a
  // re-attach (driver_relays.cpp).
  if (!link.relayed_by.empty()) config.reattach_ms = spec_.heartbeat.timeout.count();
  link.send(config);
}

void RunDriver::shut_down_agents() {
  // Relayed hosts first: their fence travels on their relay's link, which must still be open.
  std::vector<AgentLink*> ordered;
  for (auto& [host, link] : links_) {
    if (relayed_.count(host)) ordered.push_back(link.get());
  }
  for (auto& [host, link] : links_) {
    if (!relayed_.count(host)) ordered.push_back(link.get());
  }
  for (AgentLink* link : ordered) {
    if (!link->connection().closed()) link->send(proto::FenceRequest{"run finished"});
    link->connection().pump();
    link->connection().close_input();
  }
  for (auto& [host, link] : links_) {
    link->connection().shutdown(static_cast<int>(std::min<int64_t>(spec_.stop_grace.count(), 5000)));
    std::string diagnostics = link->connection().take_diagnostics();
    if (!diagnostics.empty()) log().info("agent {}: {}", host, std::string(trim(diagnostics)));
  }
}

// ---- inputs -----------------------------------------------------------------------------------

void RunDriver::pump_links(const std::vector<AgentLink*>& links) {
  for (AgentLink* link : links) {
    if (link->lost) continue;
    const std::string& host = link->host();
    link->connection().pump();
    std::string diagnostics = link->connection().take_diagnostics();
    for (const std::string& text : split(diagnostics, '\n')) {
      if (!trim(text).empty()) log().info("agent {}: {}", host, text);
    }
    Result<AgentLink::Received> received = link->receive(clock_.monotonic_ms());
    if (!received) {
      host_lost(*link, received.error().message);
      continue;
    }
    for (const std::string& frame : received->frames) {
      if (link->lost) break;
      router_.route(*link, frame);
    }
    if (!link->lost && link->connection().closed()) connection_ended(*link);
    pump_relayed();
  }
}

void RunDriver::host_lost(AgentLink& link, const std::string& reason, int64_t silent_ms) {
  if (link.lost) return;
  link.lost = true;
  router_.forget_host(link.host());
  log().warn("host {} lost: {}", link.host(), reason);
  link.connection().shutdown(0);
  // Before the supervisor hears of it: what it sends the relayed hosts next (the stop of the
  // generation) must go on their new connections.
  reattach_relayed_hosts(link);
  feed(supervisor::HostLost{link.host(), reason, silent_ms});
  lose_relayed_hosts(link, reason);
}

void RunDriver::check_pods() {
  if (!pod_watch_) return;
  std::vector<std::string> warnings;
  for (const LostPod& lost : pod_watch_->poll(clock_.monotonic_ms(), warnings)) {
    auto link = links_.find(lost.pod);
    if (link != links_.end()) host_lost(*link->second, lost.reason + " (kubernetes)", -1);
  }
  for (const std::string& warning : warnings) log().warn("{}", warning);
}

void RunDriver::check_silence() {
  int64_t timeout = spec_.heartbeat.timeout.count();
  // Directly connected hosts (relays among them) first: a relayed host hears nothing while its
  // relay is silent, and the relay's loss re-attaches it (its silence clock starts again then)
  // instead of losing it.
  // One clock read per pass, again after each loss (a loss can take a while: re-attaching): at
  // 16,384 hosts a read per link was 320,000 clock calls a second. One pass over the links
  // finds the silent ones (rarely any); each is looked at again when its turn comes.
  int64_t now = clock_.monotonic_ms();
  std::vector<AgentLink*> silent_direct, silent_relayed;
  for (auto& [host, link] : links_) {
    if (link->lost || now - link->last_heard_ms() <= timeout) continue;
    (link->relayed_by.empty() ? silent_direct : silent_relayed).push_back(link.get());
  }
  for (bool relayed : {false, true}) {
    for (AgentLink* link : relayed ? silent_relayed : silent_direct) {
      // Lost with its relay, or re-attached after the relay's loss (its silence starts again).
      if (link->lost || link->relayed_by.empty() == relayed || now - link->last_heard_ms() <= timeout) continue;
      // An SSH connection still being set up (or provisioning) has its own deadlines.
      if (!link->connected && !link->connection().local_pid()) continue;
      // Its relay has been silent for half the timeout too: the relay's verdict comes first (its
      // last frames may be a little newer than this host's, which it carried).
      if (relayed) {
        auto relay = links_.find(link->relayed_by);
        if (relay != links_.end() && !relay->second->lost && now - relay->second->last_heard_ms() > timeout / 2) continue;
      }
      std::string silence = "nothing received for " + format_duration(Millis(now - link->last_heard_ms())) +
                            " (heartbeat.timeout " + format_duration(spec_.heartbeat.timeout) + ")";
      if (link->reattaching) silence += " while re-attaching after its relay " + link->reattaching->from + " was lost";
      host_lost(*link, silence, now - link->last_heard_ms());
      now = clock_.monotonic_ms();
    }
  }
}

std::vector<std::string> RunDriver::unheard_hosts() const {
  std::vector<std::string> unheard;
  if (!supervisor_.hang_timeouts().automatic()) return unheard;  // only an auto hang timeout asks
  const int64_t now = clock_.monotonic_ms();
  const int64_t after = supervisor_.hang_timeouts().unheard_after_ms();
  for (const auto& [host, link] : links_) {
    if (!link->lost && link->connected && now - link->last_heard_ms() > after) unheard.push_back(host);
  }
  return unheard;
}

/// Pings keep agents from fencing (they fence after heartbeat.timeout of silence) and refine
/// each host's clock offset: one every max(interval, timeout / 5) leaves four lost in a row
/// before a fence, and halves the frames both ways at the default 1 s / 10 s (each ping is a
/// write to every host and a pong parsed back: 14 % of the loop at 2,048 hosts).
int64_t RunDriver::ping_spacing_ms() const {
  return std::max<int64_t>(spec_.heartbeat.interval.count(), spec_.heartbeat.timeout.count() / 5);
}

void RunDriver::ping(AgentLink& link) {
  link.send(proto::PingRequest{launcher_.take_request_id(), clock_.wall_ms()});
}

void RunDriver::send_pings_when_due() {
  int64_t now = clock_.monotonic_ms();
  if (now - pacing_.last_ping_ms < ping_spacing_ms()) return;
  pacing_.last_ping_ms = now;
  // A relay's hosts share one ping (ping_through_relays, driver_relays.cpp).
  std::unordered_map<std::string, std::vector<std::string>> by_relay;
  for (auto& [host, link] : links_) {
    if (link->lost) continue;
    auto relayed = relayed_.find(host);
    if (relayed != relayed_.end() && relayed->second.connection->accepts_input()) {
      by_relay[relayed->second.connection->relay()].push_back(host);
    } else {
      ping(*link);
    }
  }
  ping_through_relays(by_relay);
}

void RunDriver::handle_signals() {
  for (unsigned char byte : signals_->take()) {
    if (byte == SIGUSR1) {
      request_checkpoints("SIGUSR1 (Slurm's --signal before the time limit)");
      continue;
    }
    ++signals_seen_;
    std::string name = byte == SIGINT ? "SIGINT" : byte == SIGTERM ? "SIGTERM" : "SIGHUP";
    if (signals_seen_ == 1 && byte == SIGTERM) {
      // A spot notice, a pod deletion, scancel: save first (Ctrl-C and SIGHUP stop at once).
      begin_preemption("received SIGTERM");
    } else if (signals_seen_ == 1) {
      recorder_.console_line("received " + name + ": stopping the run (again to force)");
      feed(supervisor::StopRequested{"received " + name});
    } else if (signals_seen_ == 2) {
      // The user insists: skip the grace period (and a preemption's wait for its checkpoint).
      if (auto stop = checkpoints_.preemption_due(clock_.monotonic_ms(), "received " + name + " again")) feed(*stop);
      recorder_.console_line("received " + name + " again: killing workers now");
      for (auto& [host, link] : links_) {
        if (!link->lost) link->send(proto::KillRequest{-1, proto::KillSignal::kill, 0, std::nullopt});
      }
    }
  }
}

void RunDriver::begin_preemption(const std::string& reason) {
  if (checkpoints_.preempting() || supervisor::is_terminal(supervisor_.state()) ||
      supervisor_.state() == supervisor::RunState::stopping) {
    return;
  }
  events::CheckpointRequested asked = checkpoints_.begin_preemption(reason + " (preemption)", clock_.monotonic_ms());
  record(asked.to_json());
  if (asked.ranks > 0) {
    recorder_.console_line(reason + ": preempting: " + std::to_string(asked.ranks) + " worker" +
                           (asked.ranks == 1 ? "" : "s") + " asked to save step " + std::to_string(asked.step) +
                           ", then the run stops (up to " + format_duration(spec_.preempt_grace) +
                           ", preempt_grace; again to force)");
  } else {
    recorder_.console_line(reason + ": preempting: no worker speaks the worker protocol; each gets SIGTERM and " +
                           format_duration(spec_.preempt_grace) + " (preempt_grace) to save in its own handler");
  }
  if (auto stop = checkpoints_.preemption_due(clock_.monotonic_ms())) feed(*stop);
}

void RunDriver::request_checkpoints(const std::string& reason) {
  events::CheckpointRequested asked = checkpoints_.request(reason);
  record(asked.to_json());
  recorder_.console_line("checkpoint requested (" + reason + "): " + std::to_string(asked.ranks) + " worker" +
                         (asked.ranks == 1 ? "" : "s") + " asked to save step " + std::to_string(asked.step));
}

ControlReply RunDriver::handle_control(const ControlRequest& request) {
  switch (request.type) {
    case ControlRequestType::stop:
      if (request.checkpoint) {
        begin_preemption("dtrain stop --checkpoint");
      } else {
        feed(supervisor::StopRequested{"dtrain stop"});
      }
      return {true, supervisor::to_string(supervisor_.state()), supervisor_.generation(), ""};
    case ControlRequestType::status:
      return {true, supervisor::to_string(supervisor_.state()), supervisor_.generation(), ""};
  }
  return {false, "", std::nullopt, "internal bug: unhandled control request"};
}

// ---- the supervisor's Actions ------------------------------------------------------------------

void RunDriver::feed(const supervisor::Event& event) {
  std::vector<supervisor::Action> actions = supervisor_.on_event(event);
  for (const supervisor::Action& action : actions) perform(action);
}

void RunDriver::perform(const supervisor::Action& action) {
  if (const auto* event = std::get_if<supervisor::RecordEvent>(&action)) {
    record(event->event);
    // At once when the run's state changed, else at most every 500 ms (the loop catches up):
    // one write per event was O(ranks) per event — O(ranks²) fsync'd bytes for one generation.
    snapshots_.write_state(false, finished_);
  } else if (const auto* start = std::get_if<supervisor::StartGeneration>(&action)) {
    launcher_.start_generation(*start);
  } else if (const auto* stop = std::get_if<supervisor::StopGeneration>(&action)) {
    launcher_.stop_generation(*stop);
  } else if (const auto* sample = std::get_if<supervisor::CaptureSample>(&action)) {
    launcher_.capture_sample(*sample);
  } else if (const auto* finish = std::get_if<supervisor::FinishRun>(&action)) {
    finished_ = *finish;
  } else if (const auto* in_place = std::get_if<supervisor::ContinueInPlace>(&action)) {
    launcher_.continue_in_place(*in_place);
  } else if (const auto* kill = std::get_if<supervisor::KillRanks>(&action)) {
    launcher_.kill_ranks(*kill);
  } else if (const auto* check = std::get_if<supervisor::CheckHostHealth>(&action)) {
    auto target = links_.find(check->host);
    if (target != links_.end() && !target->second->lost) {
      target->second->send(proto::HealthCheckRequest{++health_requests_, check->moment, check->diagnose});
    }
  }
}

void RunDriver::send_store_replies(const std::vector<store::StoreReply>& replies) {
  for (const store::StoreReply& reply : replies) {
    auto target = links_.find(reply.to.host);
    if (target == links_.end() || target->second->lost) continue;
    target->second->send(proto::ToWorkerRequest{reply.gen, reply.to.rank, proto::to_json(reply.msg)});
  }
}

// ---- the loop ---------------------------------------------------------------------------------

int RunDriver::run() {
  if (std::optional<int> failed = open_run()) {
    delete_created_job("the run could not start");
    recorder_.flush();
    return *failed;
  }
  loop();
  return close_run();
}

std::optional<int> RunDriver::open_run() {
  if (Status opened = recorder_.open(quarantine_rule_of(spec_.health)); !opened) {
    std::fprintf(stderr, "dtrain: %s\n", opened.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  signals_.emplace();
  // Before the first connection: every host holds descriptors for the whole run.
  const size_t host_count = spec_.hosts.size() + spec_.spares.size();
  if (Result<OpenFileLimit> files = raise_open_file_limit(open_files_needed(host_count)); !files) {
    log().warn("{}", files.error().message);
    recorder_.console_line("warning: " + files.error().message);
  } else if (files->raised_hard) {
    log().info("open-file limit raised to {} for {} hosts", files->soft, host_count);
  }
  Result<RuntimeDirectoryChoice> runtime_dir = run_.create_runtime_dir();
  if (!runtime_dir) {
    std::fprintf(stderr, "dtrain: %s\n", runtime_dir.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  runtime_dir_ = std::move(runtime_dir).value();
  if (runtime_dir_.fell_back()) {
    // Someone else's /tmp/dtrain-<uid> costs one warning, not the run.
    std::string warning = runtime_dir_.refused + "; this run uses '" + runtime_dir_.directory.path() + "' instead";
    log().warn("{}", warning);
    recorder_.console_line("warning: " + warning);
    record(events::RuntimeDirFallback{runtime_dir_.directory.path(), runtime_dir_.refused}.to_json());
  }
  std::string control_path = runtime_dir_.directory.path() + "/ctl.sock";
  if (Result<ControlSocket> control = ControlSocket::open(control_path)) {
    control_.emplace(std::move(control).value());
    if (Status linked = run_.link_control_socket(control_path); !linked) {
      log().warn("ctl.sock link: {}", linked.error().message);
    }
  } else {
    log().warn("control socket unavailable: {}", control.error().message);
  }
  log().info("dtrain {} supervising run {} (pid {})", kVersion, run_.id(), ::getpid());
  snapshots_.write_state(true, finished_);
  recorder_.flush();  // `dtrain resume` must find this supervisor's pid before any worker starts
  if (pending_resume_) {
    for (const supervisor::Action& action : supervisor_.resume_from(*pending_resume_)) perform(action);
    pending_resume_.reset();
  }
  start_agents();
  if (watch_pods_) {
    std::set<std::string> pods;
    for (const auto& [host, link] : links_) pods.insert(host);
    pod_watch_.emplace(hosts::kubectl_options_for(spec_),
                       created_job_ ? created_job_->names().selector() : spec_.kubernetes.selector, std::move(pods));
  }
  return std::nullopt;
}

void RunDriver::loop() {
  // A relayed host's link has no fds (its relay's link carries it), and at 16,384
  // relayed hosts asking each one on every wakeup was a sixteenth of the loop.
  std::vector<AgentLink*> links_with_fds;
  std::vector<AgentLink*> periodic_links;  // pumped every 100 ms whether or not an fd is ready
  // Again when links were added or a connection replaced (a relay's hosts start at its hello,
  // a relayed host is reached directly after its relay's loss).
  auto list_links = [&] {
    links_with_fds.clear();
    periodic_links.clear();
    for (auto& [host, link] : links_) {
      if (!link->connection().without_fds()) links_with_fds.push_back(link.get());
      if (link->connection().needs_periodic_pump()) periodic_links.push_back(link.get());
    }
    links_added_ = false;
  };
  list_links();
  FdWatcher link_watcher;
  std::vector<pollfd> fds;
  std::vector<AgentLink*> ready_links;
  // With hundreds of hosts a frame arrives every few microseconds, and a wakeup per frame costs
  // a poll of every fd: wakeups are spaced (1 ms per 100 hosts, at most 20 ms) so that each
  // handles a batch. Small jobs (under 100 hosts) are not delayed at all.
  const int64_t min_wakeup_spacing_ms = std::min<int64_t>(20, static_cast<int64_t>(spec_.hosts.size() + spec_.spares.size()) / 100);
  int64_t last_wakeup_ms = 0;
  while (!finished_) {
    if (links_added_) list_links();
    if (min_wakeup_spacing_ms > 0) {
      int64_t since = clock_.monotonic_ms() - last_wakeup_ms;
      if (since < min_wakeup_spacing_ms) std::this_thread::sleep_for(Millis(clock_.real_ms(min_wakeup_spacing_ms - since)));
    }
    // Agent links through the epoll-backed watcher (a wait costs O(ready)); the signal pipe and
    // control sockets, with the watcher's fd, through poll.
    link_watcher.begin();
    for (AgentLink* link : links_with_fds) {
      if (link->lost) continue;
      for (pollfd fd : link->connection().poll_fds()) link_watcher.watch(fd.fd, fd.events, link);
    }
    fds.clear();
    fds.push_back({link_watcher.end_round(), POLLIN, 0});
    if (signals_->fd() >= 0) fds.push_back({signals_->fd(), POLLIN, 0});
    if (control_) control_->add_poll_fds(fds);

    int64_t now = clock_.monotonic_ms();
    // SSH connections must be pumped at least every ~100 ms for their own deadlines.
    int64_t timeout = std::min<int64_t>(spec_.heartbeat.interval.count(), 100);
    // Pings keep their own deadline: a wait never outlasts the next one.
    timeout = std::min(timeout, std::max<int64_t>(0, pacing_.last_ping_ms + ping_spacing_ms() - now));
    if (auto deadline = store_.next_deadline_ms()) timeout = std::min(timeout, std::max<int64_t>(0, *deadline - now));
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(clock_.real_ms(timeout)));
    if (ready < 0 && errno != EINTR) {
      log().error("poll: {}", errno_text(errno));
      break;
    }
    last_wakeup_ms = clock_.monotonic_ms();
    handle_signals();
    // Only the links with something to do, and every 100 ms the ones whose transport needs it
    // (SSH sessions keep their own deadlines): a pump is a system call or more, and at
    // thousands of hosts pumping them all on every wakeup was most of the loop's CPU.
    now = clock_.monotonic_ms();
    ready_links.clear();
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      for (const FdWatcher::Ready& event : link_watcher.collect()) ready_links.push_back(static_cast<AgentLink*>(event.owner));
      std::sort(ready_links.begin(), ready_links.end());  // a link with two ready fds: pumped once
      ready_links.erase(std::unique(ready_links.begin(), ready_links.end()), ready_links.end());
    }
    pump_links(ready_links);
    if (now - pacing_.last_full_pump_ms >= 100) {  // a second pump of a link just pumped finds nothing
      pacing_.last_full_pump_ms = now;
      pump_links(periodic_links);
    }
    // Before anything slower: pings are what keeps every agent from fencing itself.
    send_pings_when_due();
    if (control_) {
      control_->pump([this](const ControlRequest& request) { return handle_control(request); }, clock_.monotonic_ms());
    }
    now = clock_.monotonic_ms();
    send_store_replies(store_.expire(now));
    if (now - pacing_.last_tick_ms >= 100) {  // silences and ticks count in seconds: 10 looks a second
      pacing_.last_tick_ms = now;
      check_silence();
      check_pods();
      if (auto reason = checkpoints_.walltime_due(clock_.monotonic_ms(), log())) request_checkpoints(*reason);
      if (auto stop = checkpoints_.preemption_due(clock_.monotonic_ms())) feed(*stop);
      router_.flush_comm_warns(false);
      if (now - pacing_.last_log_flush_ms >= 1000) {  // supervisor.log is at most a second behind
        pacing_.last_log_flush_ms = now;
        log().flush();
      }
      feed(supervisor::Tick{unheard_hosts()});
    }
    snapshots_.show_status();
    snapshots_.write_metrics(false);
    metrics_.update(supervisor_, progress_, router_.host_resources(), [this](nlohmann::json event) { record(std::move(event)); });
    snapshots_.write_state(false, finished_);
  }
}

int RunDriver::close_run() {
  supervisor::FinishRun finish = finished_.value_or(supervisor::FinishRun{RunState::failed, ExitCode::internal});
  router_.flush_comm_warns(true);
  snapshots_.write_metrics(true);
  shut_down_agents();
  pod_watch_.reset();  // its kubectl is killed and reaped: no process of the run is left
  // After the agents' shutdown (a worker saving its checkpoint is not cut short by its pod's
  // deletion), before run.finished (a reader of the log sees it as part of the run).
  delete_created_job(std::string("the run ended (") + supervisor::to_string(finish.state) + ")");
  const int64_t elapsed_ms = clock_.wall_ms() - times_.submitted_wall_ms;
  record(run_finished_event(supervisor_, finish, elapsed_ms).to_json());
  if (recorder_.console_mode() != Console::Mode::quiet) {
    recorder_.flush();  // every console line first; the console is idle from here on
    recorder_.finish_console();
    print_run_summary(finish.exit_code == ExitCode::ok ? stdout : stderr, supervisor_, finish, run_, router_, elapsed_ms,
                      recorder_.worker_echo());
  }
  metrics_.write(true, supervisor_, progress_, router_.host_resources());  // after run.finished: the final goodput
  snapshots_.write_state(true, finished_);
  recorder_.flush();
  run_.unlink_control_socket();
  control_.reset();
  remove_runtime_directory(runtime_dir_);
  signals_.reset();
  return to_int(finish.exit_code);
}

void RunDriver::delete_created_job(const std::string& why) {
  if (!created_job_ || created_job_->deleted()) return;
  // The end of a run waits for this: an API server that answers in seconds when it is well.
  hosts::JobDeletion deletion = created_job_->delete_objects(Millis(60'000));
  const hosts::KubernetesJobNames& names = created_job_->names();
  events::KubernetesDeleted deleted{{created_job_->namespace_name(), names.job, names.service, names.kind}, why,
                                    std::nullopt};
  const std::string what = hosts::describe_created(names.kind, names.job, names.service);
  if (!deletion.error.empty()) {
    deleted.error = deletion.error;
    std::string warning = "kubernetes.job: could not delete " + what + ": " + deletion.error + "; delete them with " +
                          hosts::manual_delete_command(names);
    log().warn("{}", warning);
    recorder_.console_line("warning: " + warning);
  } else {
    log().info("deleted {} ({})", what, why);
  }
  record(deleted.to_json());
}

}  // namespace dtrain::run
