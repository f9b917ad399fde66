#include "launcher/transport/srun_transport.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "launcher/base/child_process.h"
#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"
#include "launcher/base/strings.h"
#include "launcher/transport/ssh_digest.h"

namespace dtrain::transport {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `<host> <base64>\n` lines for `bytes`, kSrunChunkBytes at a time.
std::string encode_lines(const std::string& host, std::string_view bytes) {
  std::string lines;
  for (size_t offset = 0; offset < bytes.size(); offset += kSrunChunkBytes) {
    lines += host;
    lines += ' ';
    lines += base64_encode(bytes.substr(offset, kSrunChunkBytes));
    lines += '\n';
  }
  return lines;
}

std::string end_line(const std::string& host) { return host + " .\n"; }

// Splits complete lines off the front of `buffer`; a partial last line stays.
template <typename OnLine>
void for_each_line(std::string& buffer, OnLine on_line) {
  size_t start = 0;
  for (size_t newline; (newline = buffer.find('\n', start)) != std::string::npos; start = newline + 1) {
    on_line(std::string_view(buffer).substr(start, newline - start));
  }
  buffer.erase(0, start);
}

void signal_eventfd(int fd) {
  uint64_t one = 1;
  ssize_t ignored = ::write(fd, &one, sizeof one);
  (void)ignored;
}

}  // namespace

std::vector<std::string> srun_step_argv(const SrunOptions& options, const std::vector<std::string>& hosts) {
  std::string count = std::to_string(hosts.size());
  std::vector<std::string> argv{options.srun,
                                "--nodes=" + count,
                                "--ntasks=" + count,
                                "--ntasks-per-node=1",
                                "--nodelist=" + join(hosts, ","),
                                // A lost node or a failed agent ends that host's task only: the
                                // supervisor decides what the run does without it.
                                "--no-kill",
                                "--kill-on-bad-exit=0",
                                // Beside the batch step and any other step; the whole node's
                                // CPUs (and, by Slurm's default for steps, its GPUs) for the
                                // workers the agent starts.
                                "--overlap",
                                "--whole",
                                "--cpu-bind=none",
                                "--mpi=none",
                                "--job-name=dtrain-agents",
                                // stdin to every task (each agent keeps its own lines).
                                "--input=all",
                                "--quiet"};
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  argv.push_back(options.dtrain_path);
  argv.push_back("agent");
  argv.push_back("--srun");
  return argv;
}

/// One running `srun` step and the demultiplexed streams of its hosts. Shared by the hosts'
/// connections; a thread moves srun's stdio.
class SrunStep {
 public:
  static Result<std::shared_ptr<SrunStep>> launch(const SrunOptions& options, std::vector<std::string> hosts);
  ~SrunStep();

  bool has(const std::string& host) const { return hosts_.count(host) > 0; }
  int wake_fd(const std::string& host) const { return hosts_.at(host).wake.get(); }
  void clear_wake(const std::string& host) {
    uint64_t count = 0;
    ssize_t ignored = ::read(hosts_.at(host).wake.get(), &count, sizeof count);
    (void)ignored;
  }
  void send(const std::string& host, std::string_view bytes);
  void close_input(const std::string& host);
  std::string take_received(const std::string& host);
  std::string take_diagnostics(const std::string& host);
  bool closed(const std::string& host) const;
  std::string close_reason(const std::string& host) const;
  /// Waits up to grace_ms for `host`'s stream to end (its agent fenced and exited).
  void wait_closed(const std::string& host, int grace_ms);
  pid_t pid() const { return srun_handle_.pid(); }
  size_t size() const { return hosts_.size(); }

 private:
  struct HostStream {
    UniqueFd wake;             // eventfd: readable when something arrived or the stream ended
    std::string received;
    std::string diagnostics;
    bool input_closed = false;
    bool ended = false;
    std::string reason;
  };

  SrunStep() = default;
  void run_io();
  void on_stdout_line(std::string_view line);
  void on_stderr_line(std::string_view line);
  void end_host(HostStream& stream, std::string reason);  // mutex held
  void queue(std::string lines);                          // mutex held

  std::map<std::string, HostStream> hosts_;
  std::string first_host_;  // general srun diagnostics go to its log
  int stop_grace_ms_ = 5000;
  std::function<void(pid_t)> before_stop_signal_;  // SrunOptions::before_stop_signal
  // srun: the I/O thread reaps it through srun_; the destructor signals it through this copy of
  // its handle, which knows about the reap (a bare pid read across threads once became -1).
  ProcessHandle srun_handle_;
  std::optional<PipedChild> srun_;    // only the I/O thread touches it once started
  bool srun_ended_ = false;           // its end was reported to every host (mutex held)
  UniqueFd wake_io_;
  mutable std::mutex mutex_;
  std::string outgoing_;
  bool close_stdin_ = false;
  bool stopping_ = false;
  std::string last_error_;  // srun's last stderr line, for the close reason
  std::thread io_;
};

Result<std::shared_ptr<SrunStep>> SrunStep::launch(const SrunOptions& options, std::vector<std::string> hosts) {
  std::shared_ptr<SrunStep> step(new SrunStep());
  for (const std::string& host : hosts) {
    int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) return Error::infra("srun transport: eventfd: " + errno_text(errno));
    step->hosts_[host].wake.reset(fd);
  }
  step->first_host_ = hosts.front();
  step->stop_grace_ms_ = options.stop_grace_ms;
  step->before_stop_signal_ = options.before_stop_signal;
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return Error::infra("srun transport: eventfd: " + errno_text(errno));
  step->wake_io_.reset(wake);

  // Its own process group: a terminal's Ctrl-C goes to dtrain, which ends the step itself.
  PipedChild::Options child_options;
  child_options.own_process_group = true;
  Result<PipedChild> srun = PipedChild::spawn(srun_step_argv(options, hosts), child_options);
  if (!srun) {
    return Error::infra("transport: srun: " + srun.error().message + "; is Slurm's srun on PATH?");
  }
  step->srun_handle_ = srun->handle();
  step->srun_.emplace(std::move(*srun));
  step->io_ = std::thread([raw = step.get()] { raw->run_io(); });
  return step;
}

SrunStep::~SrunStep() {
  {
    std::lock_guard lock(mutex_);
    for (auto& [host, stream] : hosts_) {
      if (!stream.input_closed) {
        stream.input_closed = true;
        queue(end_line(host));
      }
    }
    close_stdin_ = true;
  }
  signal_eventfd(wake_io_.get());
  // The agents fence on their EOF and exit; srun then ends by itself. Past the grace, SIGTERM
  // (srun cancels the step's tasks), then SIGKILL.
  auto reaped_within = [this](int64_t ms) {
    int64_t deadline = now_ms() + ms;
    while (!srun_handle_.reaped()) {
      if (now_ms() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  };
  if (!reaped_within(stop_grace_ms_)) {
    if (before_stop_signal_) before_stop_signal_(srun_handle_.pid());
    // srun may be reaped by the I/O thread at any moment, this one included: the handle then
    // sends nothing.
    (void)send_signal(srun_handle_, SIGTERM);
    if (!reaped_within(3000)) (void)send_signal(srun_handle_, SIGKILL);
  }
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  signal_eventfd(wake_io_.get());
  if (io_.joinable()) io_.join();
}

void SrunStep::queue(std::string lines) {
  outgoing_ += lines;
}

void SrunStep::send(const std::string& host, std::string_view bytes) {
  {
    std::lock_guard lock(mutex_);
    HostStream& stream = hosts_.at(host);
    if (stream.input_closed || stream.ended) return;
    queue(encode_lines(host, bytes));
  }
  signal_eventfd(wake_io_.get());
}

void SrunStep::close_input(const std::string& host) {
  {
    std::lock_guard lock(mutex_);
    HostStream& stream = hosts_.at(host);
    if (stream.input_closed) return;
    stream.input_closed = true;
    queue(end_line(host));
    // Every agent's input ended: srun's stdin is no longer needed.
    close_stdin_ = std::all_of(hosts_.begin(), hosts_.end(), [](const auto& entry) { return entry.second.input_closed; });
  }
  signal_eventfd(wake_io_.get());
}

std::string SrunStep::take_received(const std::string& host) {
  std::lock_guard lock(mutex_);
  return std::exchange(hosts_.at(host).received, {});
}

std::string SrunStep::take_diagnostics(const std::string& host) {
  std::lock_guard lock(mutex_);
  return std::exchange(hosts_.at(host).diagnostics, {});
}

bool SrunStep::closed(const std::string& host) const {
  std::lock_guard lock(mutex_);
  return hosts_.at(host).ended;
}

std::string SrunStep::close_reason(const std::string& host) const {
  std::lock_guard lock(mutex_);
  return hosts_.at(host).reason;
}

void SrunStep::wait_closed(const std::string& host, int grace_ms) {
  int64_t deadline = now_ms() + std::max(grace_ms, 0);
  while (!closed(host) && now_ms() < deadline) {
    pollfd fd{wake_fd(host), POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(std::min<int64_t>(50, deadline - now_ms())));
    clear_wake(host);
  }
}

void SrunStep::end_host(HostStream& stream, std::string reason) {
  if (stream.ended) return;
  stream.ended = true;
  stream.reason = std::move(reason);
  signal_eventfd(stream.wake.get());
}

void SrunStep::on_stdout_line(std::string_view line) {
  size_t space = line.find(' ');
  if (space == std::string_view::npos) return;
  auto found = hosts_.find(std::string(line.substr(0, space)));
  if (found == hosts_.end()) return;  // not ours: a task's stray output, never protocol bytes
  HostStream& stream = found->second;
  std::string_view payload = line.substr(space + 1);
  if (payload == ".") {
    end_host(stream, "agent closed its output");
    return;
  }
  std::string bytes;
  if (!base64_decode(payload, bytes)) {
    // A cut line would corrupt the stream: end it, as a broken SSH channel would be.
    end_host(stream, "the srun step delivered a damaged line for this host");
    return;
  }
  stream.received += bytes;
  signal_eventfd(stream.wake.get());
}

// srun reports a task that ended or a node that failed as "srun: error: <node>: task 3: Exited
// with exit code 1" / "...: Killed" / "srun: error: Node failure on <node>".
void SrunStep::on_stderr_line(std::string_view line) {
  std::string text(trim(line));
  if (text.empty()) return;
  last_error_ = text;
  for (auto& [host, stream] : hosts_) {
    if (text.find(" " + host + ": task ") != std::string::npos ||
        text.find("Node failure on " + host) != std::string::npos) {
      stream.diagnostics += text + "\n";
      end_host(stream, text);
      return;
    }
  }
  hosts_.at(first_host_).diagnostics += text + "\n";
}

void SrunStep::run_io() {
  std::string out_buffer, err_buffer;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      if (!outgoing_.empty()) srun_->write(std::exchange(outgoing_, {}));
      // Every agent's input ended: srun's stdin is no longer needed (EOF reaches every task).
      if (close_stdin_ && !srun_->input_closed()) srun_->close_input();
    }
    std::vector<pollfd> fds = srun_->poll_fds();
    fds.push_back({wake_io_.get(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    uint64_t count = 0;
    ssize_t ignored = ::read(wake_io_.get(), &count, sizeof count);
    (void)ignored;
    srun_->pump();

    std::lock_guard lock(mutex_);
    out_buffer += srun_->take_stdout();
    err_buffer += srun_->take_stderr();
    for_each_line(out_buffer, [this](std::string_view line) { on_stdout_line(line); });
    for_each_line(err_buffer, [this](std::string_view line) { on_stderr_line(line); });
    if (!srun_ended_ && srun_->reaped()) {
      std::string reason = "the srun step " + PipedChild::describe_status(*srun_->wait_status());
      if (!last_error_.empty()) reason += " (" + last_error_ + ")";
      for (auto& [host, stream] : hosts_) end_host(stream, reason);
      srun_ended_ = true;
    }
  }
}

namespace {

/// One host's agent in a step.
class SrunAgentConnection final : public AgentConnection {
 public:
  SrunAgentConnection(std::shared_ptr<SrunStep> step, std::string host)
      : step_(std::move(step)), host_(std::move(host)) {}
  ~SrunAgentConnection() override { shutdown(5000); }

  std::vector<pollfd> poll_fds() const override { return {{step_->wake_fd(host_), POLLIN, 0}}; }
  void pump() override { step_->clear_wake(host_); }
  void send(std::string bytes) override { step_->send(host_, bytes); }
  std::string take_received() override { return step_->take_received(host_); }
  std::string take_diagnostics() override { return step_->take_diagnostics(host_); }
  bool closed() const override { return step_->closed(host_); }
  std::string close_reason() const override { return step_->close_reason(host_); }
  void close_input() override { step_->close_input(host_); }
  void shutdown(int grace_ms) override {
    if (shut_down_) return;
    shut_down_ = true;
    step_->close_input(host_);
    step_->wait_closed(host_, grace_ms);
  }
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  bool needs_periodic_pump() const override { return false; }  // the eventfd says everything
  std::string describe() const override {
    return host_ + " (srun step of " + std::to_string(step_->size()) + " host" + (step_->size() == 1 ? "" : "s") +
           ", srun pid " + std::to_string(step_->pid()) + ")";
  }

 private:
  std::shared_ptr<SrunStep> step_;
  std::string host_;
  bool shut_down_ = false;
};

}  // namespace

SrunTransport::SrunTransport(SrunOptions options) : options_(std::move(options)) {}
SrunTransport::~SrunTransport() = default;

Result<std::unique_ptr<AgentConnection>> SrunTransport::start_agent(const AgentTarget& target) {
  bool in_first = std::find(options_.hosts.begin(), options_.hosts.end(), target.host) != options_.hosts.end() &&
                  std::find(handed_out_.begin(), handed_out_.end(), target.host) == handed_out_.end();
  std::shared_ptr<SrunStep> step;
  if (in_first) {
    if (!first_step_) {
      Result<std::shared_ptr<SrunStep>> launched = SrunStep::launch(options_, options_.hosts);
      if (!launched) return launched.error();
      first_step_ = std::move(*launched);
    }
    step = first_step_;
    handed_out_.push_back(target.host);
  } else {
    Result<std::shared_ptr<SrunStep>> launched = SrunStep::launch(options_, {target.host});
    if (!launched) return launched.error();
    step = std::move(*launched);
  }
  return std::unique_ptr<AgentConnection>(new SrunAgentConnection(std::move(step), target.host));
}

// ---- the agent's side -------------------------------------------------------------------------

int run_srun_agent_relay(const std::function<int(int input_fd, int output_fd)>& run_agent) {
  std::string node;
  if (const char* name = std::getenv("SLURMD_NODENAME"); name != nullptr && *name != '\0') {
    node = name;
  } else {
    char buffer[HOST_NAME_MAX + 1] = {};
    if (::gethostname(buffer, sizeof buffer - 1) == 0) node = buffer;
  }
  Result<Pipe> to_agent = make_pipe();
  Result<Pipe> from_agent = make_pipe();
  if (!to_agent || !from_agent) {
    std::fprintf(stderr, "dtrain agent --srun: pipe: %s\n",
                 (!to_agent ? to_agent.error() : from_agent.error()).message.c_str());
    return 1;
  }
  // stdin → the agent: this node's lines, decoded. EOF (or our "." line) closes the agent's
  // input, which makes it fence, as a closed SSH channel would. Detached: it may sit in read()
  // when the agent is done.
  int agent_input = to_agent->write_end.release();
  std::thread([agent_input, node] {
    UniqueFd input(agent_input);
    std::string buffer;
    bool ended = false;
    while (!ended) {
      Result<size_t> got = read_some(STDIN_FILENO, buffer);
      if (!got || *got == 0) break;
      for_each_line(buffer, [&](std::string_view line) {
        if (ended || line.size() <= node.size() || line.substr(0, node.size()) != node || line[node.size()] != ' ') {
          return;
        }
        std::string_view payload = line.substr(node.size() + 1);
        std::string bytes;
        if (payload == "." || !base64_decode(payload, bytes) || !write_all(input.get(), bytes)) ended = true;
      });
    }
  }).detach();
  // The agent → stdout, as lines; "." when its output ends.
  UniqueFd agent_output(from_agent->read_end.release());
  std::thread output_relay([&agent_output, node] {
    std::string chunk;
    for (;;) {
      chunk.clear();
      Result<size_t> got = read_some(agent_output.get(), chunk);
      if (!got || *got == 0) break;
      if (!write_all(STDOUT_FILENO, encode_lines(node, chunk))) return;
    }
    (void)write_all(STDOUT_FILENO, end_line(node));
  });
  int code = run_agent(to_agent->read_end.get(), from_agent->write_end.get());
  from_agent->write_end.reset();
  output_relay.join();
  return code;
}

// ---- one command on every node ---------------------------------------------------------------

Result<std::map<std::string, std::string>> run_on_each_node(const std::string& srun,
                                                            const std::vector<std::string>& hosts,
                                                            const std::string& script, int64_t timeout_ms) {
  std::string count = std::to_string(hosts.size());
  // Each task names its node first; --label puts the task number before every line it prints.
  std::vector<std::string> argv{srun,           "--nodes=" + count, "--ntasks=" + count, "--ntasks-per-node=1",
                                "--nodelist=" + join(hosts, ","), "--overlap", "--kill-on-bad-exit=0",
                                "--label",      "--quiet",          "--mpi=none",        "/bin/sh",
                                "-c",           "echo \"srun-node=$SLURMD_NODENAME\"; " + script};
  Result<CommandOutput> ran = run_command(argv, Millis(timeout_ms));
  if (!ran) return ran.error();
  std::map<std::string, std::string> by_task;
  size_t start = 0;
  const std::string& out = ran->out;
  for (size_t newline; (newline = out.find('\n', start)) != std::string::npos; start = newline + 1) {
    std::string_view line = std::string_view(out).substr(start, newline - start);
    size_t colon = line.find(": ");
    if (colon == std::string_view::npos) continue;
    by_task[std::string(trim(line.substr(0, colon)))] += std::string(line.substr(colon + 2)) + "\n";
  }
  std::map<std::string, std::string> by_node;
  for (auto& [task, text] : by_task) {
    if (text.rfind("srun-node=", 0) != 0) continue;
    size_t end = text.find('\n');
    by_node[text.substr(10, end - 10)] = text.substr(end + 1);
  }
  if (by_node.empty()) {
    std::string why = std::string(trim(ran->err));
    return Error::infra("srun ran on no node (exit " + std::to_string(ran->exit_code) + ")" +
                        (why.empty() ? std::string() : ": " + why));
  }
  return by_node;
}

}  // namespace dtrain::transport
