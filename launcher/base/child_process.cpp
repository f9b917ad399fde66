#include "launcher/base/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "launcher/base/fd.h"

namespace dtrain {

namespace {

/// Kills and reaps the child unless it was reaped already.
class OwnedChild {
 public:
  explicit OwnedChild(pid_t pid) : pid_(pid) {}
  OwnedChild(const OwnedChild&) = delete;
  OwnedChild& operator=(const OwnedChild&) = delete;
  ~OwnedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  /// Blocks until the child exits; its exit code (128 + signal when killed).
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return -1;
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_;
};

}  // namespace

Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout) {
  if (argv.empty()) return Error::internal("run_command: empty argv");
  Result<Pipe> out_pipe = make_pipe();
  Result<Pipe> err_pipe = make_pipe();
  if (!out_pipe || !err_pipe) return Error::infra("pipe: " + errno_text(errno));
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) return Error::infra("fork: " + errno_text(errno));
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_pipe->write_end.get(), STDOUT_FILENO);
    ::dup2(err_pipe->write_end.get(), STDERR_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  OwnedChild child(pid);
  out_pipe->write_end.reset();
  err_pipe->write_end.reset();

  CommandOutput output;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Error::infra(argv[0] + " did not finish within " + format_duration(timeout) + "; it was killed");
    }
    pollfd fds[2] = {{out_open ? out_pipe->read_end.get() : -1, POLLIN, 0},
                     {err_open ? err_pipe->read_end.get() : -1, POLLIN, 0}};
    int ready = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (ready < 0 && errno != EINTR) return Error::infra("poll: " + errno_text(errno));
    if (ready <= 0) continue;
    if (out_open && fds[0].revents) {
      Result<size_t> got = read_some(out_pipe->read_end.get(), output.out);
      if (!got || *got == 0) out_open = false;
    }
    if (err_open && fds[1].revents) {
      Result<size_t> got = read_some(err_pipe->read_end.get(), output.err);
      if (!got || *got == 0) err_open = false;
    }
  }
  output.exit_code = child.wait();
  return output;
}

}  // namespace dtrain
