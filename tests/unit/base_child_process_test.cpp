#include <doctest/doctest.h>

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/base/fd.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using dtrain::testing::TempDir;

namespace {

// Everything the child wrote until it closed its end (blocking reads).
std::string read_to_eof(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return text;
    text.append(buffer, static_cast<size_t>(got));
  }
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  wait_for(pid);
}

bool no_child_left() { return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD; }

std::set<int> open_fds_of(pid_t pid) {
  std::set<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    fds.insert(std::stoi(entry.path().filename().string()));
  }
  return fds;
}

std::string link_target(const std::string& path) {
  char target[PATH_MAX];
  ssize_t length = ::readlink(path.c_str(), target, sizeof target - 1);
  return length < 0 ? "" : std::string(target, static_cast<size_t>(length));
}

}  // namespace

TEST_CASE("spawn_process: an exec failure comes back with its errno, the child reaped") {
  SpawnRequest request;
  request.argv = {"/nonexistent-dtrain-dir/program"};
  SpawnOutcome spawned = spawn_process(request);
  CHECK_FALSE(spawned.ok());
  CHECK(spawned.failed_step == SpawnStep::exec);
  CHECK(errno_text(spawned.error_number) == "No such file or directory");
  CHECK(no_child_left());

  Result<PipedChild> piped = PipedChild::spawn({"dtrain-no-such-program"}, {});
  REQUIRE_FALSE(piped.ok());
  CHECK(piped.error().message == "cannot run 'dtrain-no-such-program': No such file or directory");
  CHECK(no_child_left());
}

TEST_CASE("spawn_process: a working directory that does not exist is its own step") {
  SpawnRequest request;
  request.argv = {"/bin/true"};
  request.working_directory = "/nonexistent-dtrain-dir";
  SpawnOutcome spawned = spawn_process(request);
  CHECK(spawned.failed_step == SpawnStep::working_directory);
  CHECK(spawned.error_number == ENOENT);
  CHECK(no_child_left());
}

TEST_CASE("spawn_process: own_process_group puts the child in a group of its own") {
  SpawnRequest request;
  request.argv = {"sleep", "1000"};
  request.own_process_group = true;
  SpawnOutcome grouped = spawn_process(request);
  REQUIRE(grouped.ok());
  CHECK(::getpgid(grouped.pid) == grouped.pid);
  CHECK(::kill(-grouped.pid, SIGKILL) == 0);  // the group exists and can be signalled
  CHECK(WTERMSIG(wait_for(grouped.pid)) == SIGKILL);

  request.own_process_group = false;
  SpawnOutcome plain = spawn_process(request);
  REQUIRE(plain.ok());
  CHECK(::getpgid(plain.pid) == ::getpgid(0));
  kill_and_reap(plain.pid);
  CHECK(no_child_left());
}

TEST_CASE("spawn_process: the working directory and the environment are the child's, PATH included") {
  TempDir dir;
  std::string program = dir.write("dtrain-test-program", "#!/bin/sh\npwd\necho \"$GREETING\"\necho \"${HOME-unset}\"\n");
  REQUIRE(::chmod(program.c_str(), 0755) == 0);
  Result<Pipe> output = make_pipe();
  REQUIRE(output.ok());
  SpawnRequest request;
  request.argv = {"dtrain-test-program"};  // found only through the child's PATH
  request.environment = std::vector<std::string>{"PATH=" + dir.path, "GREETING=hello"};
  request.working_directory = dir.path;
  request.stdout_fd = output->write_end.get();
  SpawnOutcome spawned = spawn_process(request);
  output->write_end.reset();
  REQUIRE(spawned.ok());
  std::string printed = read_to_eof(output->read_end.get());
  CHECK(wait_for(spawned.pid) == 0);
  std::string real_dir = std::filesystem::canonical(dir.path).string();
  CHECK(printed == real_dir + "\nhello\nunset\n");  // HOME is ours, not passed: the whole environment is the request's
}

TEST_CASE("spawn_process: kill_with_parent — the parent dies, the child gets SIGKILL") {
  // This test process adopts the orphan (as the agent does its workers' children), so it can
  // see how the child ended.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  Result<Pipe> pid_pipe = make_pipe();
  REQUIRE(pid_pipe.ok());
  pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    SpawnRequest request;
    request.argv = {"sleep", "1000"};
    request.kill_with_parent = true;
    SpawnOutcome spawned = spawn_process(request);
    ssize_t ignored = ::write(pid_pipe->write_end.get(), &spawned.pid, sizeof spawned.pid);
    (void)ignored;
    ::_exit(spawned.ok() ? 0 : 1);
  }
  pid_pipe->write_end.reset();
  pid_t child = -1;
  REQUIRE(::read(pid_pipe->read_end.get(), &child, sizeof child) == static_cast<ssize_t>(sizeof child));
  CHECK(wait_for(parent) == 0);
  REQUIRE(child > 0);
  // A bound so that a broken kill_with_parent fails here instead of hanging for 1000 s.
  UniqueFd child_exit(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  REQUIRE(child_exit.valid());
  pollfd exited{child_exit.get(), POLLIN, 0};
  int ready = ::poll(&exited, 1, 60'000);
  if (ready != 1) ::kill(child, SIGKILL);
  CHECK(ready == 1);
  int status = wait_for(child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(no_child_left());
}

TEST_CASE("spawn_process: the child holds only fds 0-2 and the ones asked for") {
  // Ours without CLOEXEC, as inherited from sshd or a careless library: they must not leak.
  int leaked = ::open("/dev/null", O_RDONLY);
  int kept = ::open("/dev/null", O_RDONLY);
  REQUIRE(leaked > 2);
  REQUIRE(kept > 2);
  Result<Pipe> output = make_pipe();
  REQUIRE(output.ok());
  SpawnRequest request;
  request.argv = {"sleep", "1000"};
  request.stdout_fd = output->write_end.get();
  request.fds_to_keep = {kept};
  SpawnOutcome spawned = spawn_process(request);
  REQUIRE(spawned.ok());
  std::string fd_dir = "/proc/" + std::to_string(spawned.pid) + "/fd/";
  // Not the first look: spawn_process returns when the exec-failure pipe closes, which the kernel
  // does in the same pass as the other close-on-exec fds (lowest first), and then `sleep`'s
  // dynamic loader opens libc.so.6 on fd 3 for a moment. The set must hold still (10 looks in a
  // row, 20 ms apart) at what was asked for.
  std::set<int> expected{0, 1, 2, kept};
  for (int tries = 0, same = 0; tries < 250 && same < 10; ++tries) {
    same = open_fds_of(spawned.pid) == expected ? same + 1 : 0;
    ::usleep(20 * 1000);
  }
  auto described = [&](const std::set<int>& fds) {
    std::string text;
    for (int fd : fds) text += std::to_string(fd) + " -> " + link_target(fd_dir + std::to_string(fd)) + "; ";
    return text;
  };
  CHECK_MESSAGE(open_fds_of(spawned.pid) == expected, "leaked " << leaked << ", kept " << kept << "; the child holds " << described(open_fds_of(spawned.pid)));
  CHECK(link_target(fd_dir + "0") == "/dev/null");
  CHECK(link_target(fd_dir + "1") == link_target("/proc/self/fd/" + std::to_string(output->write_end.get())));
  CHECK(link_target(fd_dir + "2") == "/dev/null");
  kill_and_reap(spawned.pid);
  ::close(leaked);
  ::close(kept);
  CHECK(no_child_left());
}

TEST_CASE("spawn_process: an owner whose own stdio is closed still places the child's right") {
  // With fds 0-2 closed, a new CLOEXEC pipe lands on 0 and 1: the write end given as the
  // child's stdout IS fd 1, and dup2(1, 1) alone would keep its CLOEXEC and close it at exec;
  // and spawn_process's own exec-failure pipe gets fd 2, which the child's stderr replaces.
  pid_t owner = ::fork();
  REQUIRE(owner >= 0);
  if (owner == 0) {
    ::close(0);
    ::close(1);
    ::close(2);
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0 || ends[0] != 0 || ends[1] != 1) ::_exit(2);
    SpawnRequest request;
    request.argv = {"/bin/sh", "-c", "echo out; echo err >&2"};
    request.stdout_fd = ends[1];
    request.stderr_fd = ends[1];
    SpawnOutcome spawned = spawn_process(request);
    ::close(ends[1]);
    if (!spawned.ok()) ::_exit(3);
    std::string printed = read_to_eof(ends[0]);
    int status = wait_for(spawned.pid);
    if (printed != "out\nerr\n" || status != 0) ::_exit(4);
    // The exec-failure pipe got fd 2 here: it must not be the child's stderr.
    request.argv = {"/nonexistent-dtrain-dir/program"};
    SpawnOutcome failed = spawn_process(request);
    ::_exit(failed.failed_step == SpawnStep::exec && failed.error_number == ENOENT ? 0 : 5);
  }
  int status = wait_for(owner);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("run_command runs a command to its end through PipedChild") {
  Result<CommandOutput> output = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, Millis(60'000));
  REQUIRE(output.ok());
  CHECK(output->exit_code == 3);
  CHECK(output->out == "out\n");
  CHECK(output->err == "err\n");
  CHECK(no_child_left());
}

TEST_CASE("run_command ends at the command's exit even when a daemon it started holds its stdout") {
  // Before: the read waited for an EOF the daemon never gave, until the timeout, and the command
  // that had finished was reported as hung (an agent's stack probe delayed its hello this way).
  TempDir dir;
  const std::string pid_file = dir.path + "/daemon pid";
  const std::string script =
      "echo before; setsid sh -c 'echo $$ > \"$1\"; exec sleep 600' daemon \"$1\" & "
      "while [ ! -s \"$1\" ]; do sleep 0.01; done; echo after; exit 4";
  Result<CommandOutput> output = run_command({"/bin/sh", "-c", script, "probe", pid_file}, Millis(20'000));
  pid_t daemon = 0;
  if (FILE* file = std::fopen(pid_file.c_str(), "r")) {
    if (std::fscanf(file, "%d", &daemon) != 1) daemon = 0;
    std::fclose(file);
  }
  REQUIRE(daemon > 0);
  CHECK(::kill(daemon, 0) == 0);  // it outlived the command: the case under test
  kill_and_reap(daemon);  // ours to reap when an earlier case made this process a subreaper
  REQUIRE_MESSAGE(output.ok(), output.error().message);
  CHECK(output->exit_code == 4);
  CHECK(output->out == "before\nafter\n");
  CHECK(no_child_left());
}

TEST_CASE("run_command_with_input: the input reaches the command whole, then EOF (kubectl create -f -)") {
  // Larger than a pipe's buffer: written as the command reads it, not all at once.
  std::string input;
  for (int i = 0; input.size() < (1u << 20); ++i) input += "line " + std::to_string(i) + "\n";
  dtrain::Result<dtrain::CommandOutput> echoed =
      dtrain::run_command_with_input({"/bin/sh", "-c", "cat; echo done >&2"}, input, dtrain::Millis(30'000));
  REQUIRE_MESSAGE(echoed.ok(), echoed.error().message);
  CHECK(echoed->exit_code == 0);
  CHECK(echoed->out == input);  // every byte, and cat saw EOF (it exited)
  CHECK(echoed->err == "done\n");
}
