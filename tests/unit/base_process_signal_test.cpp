// launcher/base/process_signal: the one way dtrain signals. pid/group <= 1 is refused and nothing
// is sent; a child's handle sends while the child is unreaped and nothing after its reap, to the
// process or its group (PipedChild included); a process named by pid is refused once gone; each
// of the three mechanisms (pidfd with the group flag, pidfd without it, pid + start time) does
// the same. And no other file of launcher/, cli/ or worker/ sends a signal by itself.

#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"
#include "tests/unit/signal_log.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using dtrain::testing::process_state_letter;
using dtrain::testing::SignalLog;
using dtrain::testing::TempDir;

namespace {

/// The mechanism for one block of a test; automatic again afterwards.
struct PinnedMechanism {
  explicit PinnedMechanism(SignalMechanism mechanism) { set_signal_mechanism(mechanism); }
  ~PinnedMechanism() { set_signal_mechanism(SignalMechanism::automatic); }
};

const SignalMechanism kEveryMechanism[] = {SignalMechanism::automatic, SignalMechanism::pidfd_without_group_flag,
                                           SignalMechanism::start_time};

const char* name_of(SignalMechanism mechanism) {
  switch (mechanism) {
    case SignalMechanism::automatic: return "automatic";
    case SignalMechanism::pidfd_without_group_flag: return "pidfd without the group flag";
    case SignalMechanism::start_time: return "pid + start time";
  }
  return "?";
}

/// Dead: gone, or a zombie its new parent has not reaped yet. Polled up to 5 s.
bool dies_within_5s(pid_t pid) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    char state = process_state_letter(pid);
    if (state == 0 || state == 'Z') return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// A process this test started but does not reap (a grandchild): SIGKILLed when the test ends,
/// whatever happened, unless its pid no longer exists.
struct Stray {
  pid_t pid = -1;
  ~Stray() {
    if (pid > 1 && process_state_letter(pid) != 0) ::kill(pid, SIGKILL);
  }
};

/// `sh -c 'sleep 60 & echo $!; wait'` in its own process group: a leader and one more member.
/// Returns the leader's PipedChild and sets `member` to the sleep's pid.
PipedChild spawn_group_with_member(Stray& member) {
  Result<PipedChild> started = PipedChild::spawn({"/bin/sh", "-c", "sleep 60 & echo $!; wait"}, {true, false});
  REQUIRE(started);
  PipedChild& child = *started;
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds = child.poll_fds();
    ::poll(fds.data(), fds.size(), 50);
    child.pump();
    out += child.take_stdout();
  }
  REQUIRE(out.find('\n') != std::string::npos);
  member.pid = std::stoi(out);
  REQUIRE(member.pid > 1);
  return std::move(child);
}

/// A bare child (fork) that sleeps until killed, in its own group, not reaped by anyone else.
pid_t fork_sleeper() {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    for (;;) ::pause();
  }
  ::setpgid(pid, pid);
  return pid;
}

}  // namespace

TEST_CASE("pid and group 0, 1 and -1 are refused as internal bugs and nothing is sent") {
  SignalLog log;
  // Signal 0: should the refusal ever fail, kill(-1, 0) still harms nobody.
  std::vector<ProcessHandle> handles = {ProcessHandle(), ProcessHandle::for_child(-1), ProcessHandle::for_child(0),
                                        ProcessHandle::for_child(1)};
  for (const ProcessHandle& handle : handles) {
    for (SignalScope scope : {SignalScope::process, SignalScope::group}) {
      CAPTURE(handle.pid());
      Status sent = send_signal(handle, 0, scope);
      REQUIRE_FALSE(sent);
      CHECK(sent.error().kind == ErrorKind::internal);
      std::string expected = std::string("internal bug: refused to signal ") +
                             (scope == SignalScope::group ? "process group " : "pid ") + std::to_string(handle.pid());
      CHECK(sent.error().message.rfind(expected, 0) == 0);
      CHECK(sent.error().message.find("nothing was sent") != std::string::npos);
    }
  }
  CHECK(send_signal(ProcessHandle(), SIGKILL).error().message ==
        "internal bug: refused to signal pid -1 with SIGKILL (kill(-1) reaches every process the caller may "
        "signal); nothing was sent");
  for (pid_t pid : {-1, 0, 1}) {
    Result<ProcessHandle> adopted = ProcessHandle::for_process(pid);
    REQUIRE_FALSE(adopted);
    CHECK(adopted.error().kind == ErrorKind::internal);
    CHECK(adopted.error().message.rfind("internal bug: refused to signal pid " + std::to_string(pid), 0) == 0);
  }
  // A signal number the kernel does not have is refused the same way.
  pid_t sleeper = fork_sleeper();
  ProcessHandle child = ProcessHandle::for_child(sleeper);
  CHECK(send_signal(child, 4096).error().kind == ErrorKind::internal);
  CHECK(send_signal(child, -1).error().kind == ErrorKind::internal);

  CHECK(log.count(SignalOutcome::sent) == 0);
  CHECK(log.count(SignalOutcome::refused) == handles.size() * 2 + 1 + 3 + 2);
  for (const SignalAttempt& attempt : log.attempts()) CHECK(attempt.outcome == SignalOutcome::refused);

  CHECK(send_signal(child, SIGKILL));
  CHECK(WTERMSIG(child.reap()) == SIGKILL);
}

TEST_CASE("a child's handle signals it while unreaped and nothing after its reap") {
  for (SignalMechanism mechanism : kEveryMechanism) {
    CAPTURE(name_of(mechanism));
    PinnedMechanism pinned(mechanism);
    SignalLog log;
    pid_t pid = fork_sleeper();
    ProcessHandle handle = ProcessHandle::for_child(pid);
    ProcessHandle copy = handle;  // another owner (a thread) sees the same reap
    CHECK((handle.exit_fd() >= 0) == (mechanism != SignalMechanism::start_time));
    CHECK_FALSE(handle.try_reap());
    CHECK(send_signal(copy, 0));
    REQUIRE(send_signal(handle, SIGTERM));
    int status = handle.reap();
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGTERM);
    CHECK(copy.reaped());
    CHECK(copy.try_reap() == status);

    // From now on the number may be anyone's: nothing is sent, to the pid or to its group.
    Status again = send_signal(copy, SIGKILL);
    REQUIRE_FALSE(again);
    CHECK(again.error().kind == ErrorKind::infra);
    CHECK(again.error().message ==
          "pid " + std::to_string(pid) + ": no such process (it exited and was reaped); SIGKILL not sent");
    CHECK_FALSE(send_signal(handle, SIGKILL, SignalScope::group));
    std::vector<SignalAttempt> attempts = log.attempts();
    REQUIRE(attempts.size() == 4);
    CHECK(attempts[0].outcome == SignalOutcome::sent);
    CHECK(attempts[1].outcome == SignalOutcome::sent);
    CHECK(attempts[1].signal == SIGTERM);
    CHECK(attempts[2].outcome == SignalOutcome::gone);
    CHECK(attempts[3].outcome == SignalOutcome::gone);
    CHECK(attempts[3].scope == SignalScope::group);
    CHECK(attempts[3].pid == pid);
  }
}

TEST_CASE("a child reaped behind its handle's back is not signalled") {
  // The agent reaps its workers with waitpid(-1), not through their handles.
  for (SignalMechanism mechanism : kEveryMechanism) {
    CAPTURE(name_of(mechanism));
    PinnedMechanism pinned(mechanism);
    pid_t pid = fork_sleeper();
    ProcessHandle handle = ProcessHandle::for_child(pid);
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    SignalLog log;
    CHECK_FALSE(send_signal(handle, SIGKILL));
    CHECK_FALSE(send_signal(handle, SIGKILL, SignalScope::group));
    CHECK(log.count(SignalOutcome::gone) == 2);
    CHECK(log.count(SignalOutcome::sent) == 0);
  }
}

TEST_CASE("a group signal reaches every member while the leader is unreaped") {
  for (SignalMechanism mechanism : kEveryMechanism) {
    CAPTURE(name_of(mechanism));
    PinnedMechanism pinned(mechanism);
    Stray member;
    PipedChild leader = spawn_group_with_member(member);
    SignalLog log;
    REQUIRE(send_signal(leader.handle(), SIGKILL, SignalScope::group));
    CHECK(log.count(SignalOutcome::sent) == 1);
    CHECK(dies_within_5s(member.pid));
    leader.terminate(0);
    REQUIRE(leader.wait_status());
    CHECK(WTERMSIG(*leader.wait_status()) == SIGKILL);
  }
}

TEST_CASE("PipedChild: the destructor SIGKILLs a live child's group, and never a reaped child's") {
  SUBCASE("not reaped: the whole group goes") {
    Stray member;
    SignalLog log;
    {
      PipedChild leader = spawn_group_with_member(member);
    }
    CHECK(dies_within_5s(member.pid));
    std::vector<SignalAttempt> attempts = log.attempts();
    REQUIRE(!attempts.empty());
    CHECK(attempts[0].scope == SignalScope::group);
    CHECK(attempts[0].signal == SIGKILL);
    CHECK(attempts[0].outcome == SignalOutcome::sent);
  }
  SUBCASE("reaped: its group number may be someone else's, so nothing is sent") {
    Result<PipedChild> started = PipedChild::spawn({"/bin/sh", "-c", "exit 3"}, {true, false});
    REQUIRE(started);
    pid_t pid = started->pid();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(started->stdout_closed() && started->reaped()) && std::chrono::steady_clock::now() < deadline) {
      std::vector<pollfd> fds = started->poll_fds();
      ::poll(fds.data(), fds.size(), 50);
      started->pump();
    }
    REQUIRE(started->reaped());
    CHECK(WEXITSTATUS(*started->wait_status()) == 3);
    SignalLog log;
    { PipedChild owner = std::move(*started); }
    CHECK(log.attempts().size() == 1);  // the group SIGKILL, skipped
    CHECK(log.count(SignalOutcome::sent) == 0);
    for (const SignalAttempt& attempt : log.attempts()) {
      CHECK(attempt.pid == pid);
      CHECK(attempt.outcome == SignalOutcome::gone);
    }
  }
}

TEST_CASE("a process named by pid: taken once, refused when gone or a zombie") {
  for (SignalMechanism mechanism : kEveryMechanism) {
    CAPTURE(name_of(mechanism));
    PinnedMechanism pinned(mechanism);
    pid_t pid = fork_sleeper();
    Result<ProcessHandle> adopted = ProcessHandle::for_process(pid);
    REQUIRE(adopted);
    CHECK(adopted->pid() == pid);
    CHECK(send_signal(*adopted, 0));
    REQUIRE(send_signal(*adopted, SIGKILL));
    // Exited, not reaped: a zombie is no process to signal.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (process_state_letter(pid) != 'Z' && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(process_state_letter(pid) == 'Z');
    Result<ProcessHandle> zombie = ProcessHandle::for_process(pid);
    REQUIRE_FALSE(zombie);
    CHECK(zombie.error().kind == ErrorKind::infra);
    CHECK(zombie.error().message == "pid " + std::to_string(pid) + ": no such process (it has exited)");
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    // Reaped: the handle taken while it lived sends nothing.
    Status late = send_signal(*adopted, SIGKILL);
    REQUIRE_FALSE(late);
    CHECK(late.error().kind == ErrorKind::infra);
  }
}

// ---- no other way to signal -------------------------------------------------------------------

namespace {

/// `text` with comments, string literals and character literals blanked (newlines kept, so line
/// numbers stay), digit separators (10'000) left alone.
std::string code_only(const std::string& text) {
  std::string out = text;
  size_t i = 0;
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < out.size(); ++k) {
      if (out[k] != '\n') out[k] = ' ';
    }
  };
  auto identifier_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  while (i < text.size()) {
    char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      size_t end = text.find('\n', i);
      if (end == std::string::npos) end = text.size();
      blank(i, end);
      i = end;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      end = end == std::string::npos ? text.size() : end + 2;
      blank(i, end);
      i = end;
    } else if (c == 'R' && i + 1 < text.size() && text[i + 1] == '"' && (i == 0 || !identifier_char(text[i - 1]))) {
      size_t open = text.find('(', i + 2);
      if (open == std::string::npos) break;
      std::string close = ")" + text.substr(i + 2, open - i - 2) + "\"";
      size_t end = text.find(close, open);
      end = end == std::string::npos ? text.size() : end + close.size();
      blank(i, end);
      i = end;
    } else if (c == '"' || (c == '\'' && (i == 0 || !std::isxdigit(static_cast<unsigned char>(text[i - 1]))))) {
      size_t end = i + 1;
      while (end < text.size() && text[end] != c && text[end] != '\n') end += text[end] == '\\' ? 2 : 1;
      blank(i, end + 1);
      i = end + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c)) && (i == 0 || !identifier_char(text[i - 1]))) {
      while (i < text.size() && (identifier_char(text[i]) || text[i] == '\'' || text[i] == '.')) ++i;
    } else {
      ++i;
    }
  }
  return out;
}

/// "path:line: text" for every call that sends a signal by itself in the C++ files under `root`
/// (paths relative to it), except in `allowed` (relative too).
std::vector<std::string> signal_calls_under(const std::string& root, const std::vector<std::string>& folders,
                                            const std::string& allowed) {
  static const std::regex call(
      R"((^|[^A-Za-z0-9_.>])(kill|killpg|tkill|tgkill|pidfd_send_signal|pthread_kill|sigqueue)\s*\(|\bSYS_(kill|tkill|tgkill|pidfd_send_signal|rt_sigqueueinfo|rt_tgsigqueueinfo)\b)");
  std::vector<std::string> found;
  for (const std::string& folder : folders) {
    std::error_code error;
    for (auto it = std::filesystem::recursive_directory_iterator(root + "/" + folder, error);
         it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
      std::string extension = it->path().extension().string();
      if (!it->is_regular_file() || (extension != ".cpp" && extension != ".h" && extension != ".cc" && extension != ".hpp")) {
        continue;
      }
      std::string relative = std::filesystem::relative(it->path(), root).string();
      if (relative == allowed) continue;
      Result<std::string> text = read_file(it->path().string());
      REQUIRE(text);
      std::istringstream code(code_only(*text));
      std::istringstream original(*text);
      std::string line, shown;
      for (int number = 1; std::getline(code, line); ++number) {
        std::getline(original, shown);
        if (std::regex_search(line, call)) found.push_back(relative + ":" + std::to_string(number) + ": " + shown);
      }
    }
  }
  return found;
}

}  // namespace

TEST_CASE("no file of launcher/, cli/ or worker/ sends a signal but launcher/base/process_signal.cpp") {
  std::vector<std::string> found =
      signal_calls_under(DTRAIN_SOURCE_DIR, {"launcher", "cli", "worker"}, "launcher/base/process_signal.cpp");
  for (const std::string& call : found) FAIL_CHECK("a signal not sent through send_signal(): " << call);
  CHECK(found.empty());
  // The scan saw the sources (not an empty or wrong directory): the one allowed file has calls.
  Result<std::string> allowed = read_file(std::string(DTRAIN_SOURCE_DIR) + "/launcher/base/process_signal.cpp");
  REQUIRE(allowed);
  CHECK(code_only(*allowed).find("::kill(") != std::string::npos);
}

TEST_CASE("the scan names every planted signal call by file and line, and nothing else") {
  TempDir dir;
  std::filesystem::create_directories(dir.path + "/launcher/x");
  dir.write("launcher/x/bad.cpp",
            "int a = 10'000;  // kill(-1, 9) in a comment\n"           // 1: no
            "  ::kill(pid_, SIGTERM);\n"                                 // 2: yes
            "const char* s = \"kill(1, 9) in a string\";\n"             // 3: no
            "if (kill (pid, 0) == 0) {}\n"                                // 4: yes
            "killpg(group, SIGKILL);\n"                                  // 5: yes
            "/* a block\n kill(-pid, 9)\n */ kill_all(host); skill(x);\n"  // 6-8: no
            "syscall(SYS_pidfd_send_signal, fd, 9, nullptr, 0);\n"       // 9: yes
            "tgkill(tgid, tid, SIGABRT); child.kill(); p->kill();\n"     // 10: yes (tgkill)
            "auto r = R\"(kill(1))\"; char q = '\\''; x = kill(y, 1);\n");  // 11: yes (after the literals)
  dir.write("launcher/x/fine.h", "void send(const ProcessHandle& h);  // not ::kill(h)\n");
  dir.write("launcher/x/notes.txt", "kill(-1, 9)\n");
  std::vector<std::string> found = signal_calls_under(dir.path, {"launcher"}, "launcher/x/allowed.cpp");
  std::vector<std::string> lines;
  for (const std::string& entry : found) lines.push_back(entry.substr(0, entry.find(": ")));
  CHECK(lines == std::vector<std::string>{"launcher/x/bad.cpp:2", "launcher/x/bad.cpp:4", "launcher/x/bad.cpp:5",
                                          "launcher/x/bad.cpp:9", "launcher/x/bad.cpp:10", "launcher/x/bad.cpp:11"});
  CHECK(found[0] == "launcher/x/bad.cpp:2:   ::kill(pid_, SIGTERM);");
  // The allowed file may hold them.
  dir.write("launcher/x/allowed.cpp", "::kill(pid, signal);\n");
  CHECK(signal_calls_under(dir.path, {"launcher"}, "launcher/x/allowed.cpp").size() == found.size());
}
