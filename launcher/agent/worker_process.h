#pragma once
// One worker process the agent spawned: its pid (also its process group), its output pipes and
// the last lines of its output, kept for the exit report.

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/proto/agent_messages.h"

#include "launcher/agent/line_splitter.h"
#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"
#include "launcher/base/result.h"

namespace dtrain::agent {

/// What `spawn` asks for, for one worker (messages.h: spawn).
struct WorkerLaunch {
  int gen = 0;
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> argv;
  std::string workdir;                       ///< empty: the agent's working directory
  std::map<std::string, std::string> env;    ///< merged over the agent's environment
  size_t log_tail_lines = 20;
  /// A warm standby (messages.h spawn.standby): no rank yet, no generation; assign() makes it one.
  bool standby = false;
};

/// The generation a standby is reported under internally: none a kill or dump can name (a kill
/// of every generation, gen -1, still covers it).
inline constexpr int kStandbyGeneration = -1'000'000;

/// The environment a worker gets for a spawn's `env`: this agent's, then `env` over it, then
/// PATH as worker_search_path makes it (the stack probe runs the worker's interpreter in it).
std::map<std::string, std::string> worker_environment(const std::map<std::string, std::string>& env);

/// The value of PATH a worker of `launch` gets (worker_search_path with this agent's own
/// directory and PATH): an assign must give a standby what a new process would have had.
std::string worker_path_for(const WorkerLaunch& launch);

/// The worker's PATH: `dtrain_dir` (the directory of the dtrain running this agent, where
/// dtrain-train lies beside it) first, then the base: the PATH the spawn asked for (the spec's
/// worker.env), else this agent's own PATH on its host (so remote workers keep the host's
/// conda, modules and the like, not the launch node's), else /usr/local/bin:/usr/bin:/bin.
/// Pure, for tests.
std::string worker_search_path(const std::string& dtrain_dir, const std::string* requested_path,
                               const char* agent_path);

/// Receives each complete output line: (stream "stdout"|"stderr", line).
using LineSink = std::function<void(const char* stream, std::string line)>;

/// Not a PipedChild, though started by the same spawn_process(): the agent reaps its workers
/// itself (waitpid(-1) as a subreaper, which also collects their orphaned children), and its
/// kill and fence logic owns their process groups. A PipedChild's destructor and wait_status()
/// would SIGKILL and reap the pid behind the agent's back, and the exit report would lose it.
class WorkerProcess {
 public:
  /// Starts the worker (spawn_process) in its own process group, killed with the agent, every
  /// signal at its default, stdin from /dev/null, stdout and stderr into pipes. A failure
  /// before exec (chdir, exec itself) comes back as an Error whose message is what
  /// spawn_failed reports ("worker.command[0] 'foo': No such file or directory"); the child is
  /// reaped by then.
  static Result<std::unique_ptr<WorkerProcess>> spawn(const WorkerLaunch& launch);

  pid_t pid() const { return pid_; }
  /// What the agent's kill and fence signal it and its group through (send_signal): it names
  /// this process, not whatever has its pid after the agent reaped it.
  const ProcessHandle& handle() const { return handle_; }
  /// The generation the agent reports this worker under: the one it was spawned for, until an
  /// in-place recovery (gen_changed) carries it over to a later one.
  int gen() const { return gen_; }
  /// The generation it was spawned for. Its environment keeps saying so (DTRAIN_GENERATION,
  /// TORCHELASTIC_ERROR_FILE's name): a process's environment cannot be changed from outside.
  int spawn_gen() const { return launch_.gen; }
  /// gen_changed: from now on this worker belongs to `gen`.
  void change_generation(int gen) { gen_ = gen; }
  int rank() const { return launch_.rank; }
  int local_rank() const { return launch_.local_rank; }
  /// The environment the agent gave it over its own: the spawn's, or for a promoted standby the
  /// assign's. Its /proc/<pid>/environ cannot show the latter (a standby sets it over the
  /// environment it started with), so this is what the agent reads its paths from.
  const std::map<std::string, std::string>& assigned_env() const { return launch_.env; }

  /// A warm standby not assigned yet: it belongs to no generation (gen() is kStandbyGeneration),
  /// its output is not a rank's, and its exit is nobody's business but the agent's.
  bool standby() const { return launch_.standby; }
  /// The standby takes the place of `launch` (its gen, rank, local_rank and env): from now on it
  /// is that worker. The tail starts afresh: what it wrote as a standby is no rank's output.
  void assign(WorkerLaunch launch);

  /// The open output pipes (for poll), -1 once closed.
  int stdout_fd() const { return stdout_.fd.get(); }
  int stderr_fd() const { return stderr_.fd.get(); }

  /// Reads what is available on `fd` (one of the two above) and passes complete lines to
  /// `sink`; at EOF the partial line too, and the pipe is closed.
  void read_output(int fd, const LineSink& sink);

  /// After the worker has been reaped: reads whatever its pipes hold now, passes every line
  /// (partial ones included) to `sink`, and closes them. Does not wait for EOF: a daemonised
  /// grandchild may hold the pipes open for ever.
  void drain_output(const LineSink& sink);

  /// The last log_tail_lines lines, both streams in arrival order.
  std::vector<std::string> tail() const;

  /// Set when a kill or fence signalled this worker; reported as exit.killed_by_agent.
  bool signalled_by_agent = false;

 private:
  struct Stream {
    const char* name;
    UniqueFd fd;
    LineSplitter splitter;
  };
  WorkerProcess(WorkerLaunch launch, pid_t pid, UniqueFd out, UniqueFd err);
  void deliver(Stream& stream, std::vector<std::string> lines, const LineSink& sink);
  void read_stream(Stream& stream, bool until_eof_or_empty, const LineSink& sink);

  WorkerLaunch launch_;
  int gen_;
  pid_t pid_;
  ProcessHandle handle_;
  Stream stdout_;
  Stream stderr_;
  std::deque<std::string> tail_;
};

/// The exit part of an `exit` message from a waitpid status: code, or signal and signal_name
/// (+ core_dumped when the kernel says so).
void set_wait_status(proto::WorkerExitReport& exit, int status);

/// The same as text for a log line: "exit code 3", "SIGKILL (core dumped)".
std::string describe_wait_status(int status);

/// "SIGKILL" for SIGKILL; "signal 64" when the number has no name.
std::string signal_name(int signal_number);

}  // namespace dtrain::agent
