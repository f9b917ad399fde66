// The srun transport's step destructor (launcher/transport/srun_transport.cpp): past the grace it
// SIGTERMs srun, while the step's I/O thread may reap srun at any moment. It used to read srun's
// pid without the lock after that thread had set it to -1: kill(-1, SIGTERM), every process of
// the user. Here a fake srun is reaped by that thread at exactly that moment (the test seam
// SrunOptions::before_stop_signal runs between the "not reaped yet" check and the signal), and
// the signal must go nowhere: not to -1, not to srun's old pid or group.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "launcher/base/child_process.h"
#include "launcher/transport/srun_transport.h"
#include "tests/unit/signal_log.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using dtrain::testing::process_state_letter;
using dtrain::testing::SignalLog;
using dtrain::testing::TempDir;

namespace {

/// An `srun` that starts no step and never ends by itself: the agents' EOF does not end it.
std::string write_fake_srun(const TempDir& dir) {
  std::string path = dir.write("srun", "#!/bin/sh\nexec sleep 300\n");
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
  return path;
}

/// Starts one step (one host) and destroys it, with `before_stop_signal` as the seam.
void start_and_destroy_step(const std::string& srun, std::function<void(pid_t)> before_stop_signal) {
  transport::SrunOptions options;
  options.srun = srun;
  options.dtrain_path = "/bin/false";
  options.stop_grace_ms = 100;  // the fake never ends by itself: no need to wait 5 s for that
  options.before_stop_signal = std::move(before_stop_signal);
  transport::SrunTransport transport(options);
  transport::AgentTarget target;
  target.host = "node1";
  Result<std::unique_ptr<transport::AgentConnection>> connection = transport.start_agent(target);
  REQUIRE(connection);
  (*connection)->shutdown(0);
  connection->reset();  // the last owner of the step: its destructor runs here
}

/// True once `pid` is gone from /proc (reaped), polled up to 5 s.
bool reaped_within_5s(pid_t pid) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (process_state_letter(pid) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// Another process of this user, in a group of its own: kill(-1, ...) would end it.
PipedChild start_bystander() {
  Result<PipedChild> bystander = PipedChild::spawn({"/bin/sleep", "60"}, {true, false});
  REQUIRE(bystander);
  return std::move(*bystander);
}

}  // namespace

TEST_CASE("srun step destructor: srun reaped between the check and the SIGTERM gets no signal, nor does -1") {
  TempDir dir;
  std::string srun = write_fake_srun(dir);
  PipedChild bystander = start_bystander();
  SignalLog log;
  pid_t srun_pid = -1;
  bool reaped_in_gap = false;
  start_and_destroy_step(srun, [&](pid_t pid) {
    srun_pid = pid;
    // srun ends now, and the step's I/O thread reaps it before the destructor goes on.
    ::kill(pid, SIGKILL);
    reaped_in_gap = reaped_within_5s(pid);
  });
  REQUIRE(srun_pid > 1);
  CHECK(reaped_in_gap);

  std::vector<SignalAttempt> attempts = log.attempts();
  REQUIRE(!attempts.empty());
  CHECK(attempts[0].pid == srun_pid);
  CHECK(attempts[0].signal == SIGTERM);
  CHECK(attempts[0].scope == SignalScope::process);
  CHECK(attempts[0].outcome == SignalOutcome::gone);
  for (const SignalAttempt& attempt : attempts) {
    CHECK(attempt.pid == srun_pid);  // never -1, never another number
    CHECK(attempt.outcome == SignalOutcome::gone);  // srun's group neither: it is reaped
  }
  CHECK(log.count(SignalOutcome::sent) == 0);
  bystander.pump();
  CHECK_FALSE(bystander.reaped());
  CHECK(process_state_letter(bystander.pid()) != 'Z');
}

TEST_CASE("srun step destructor: an srun that outlives the grace gets SIGTERM, and nothing once reaped") {
  TempDir dir;
  std::string srun = write_fake_srun(dir);
  SignalLog log;
  pid_t srun_pid = -1;
  start_and_destroy_step(srun, [&](pid_t pid) { srun_pid = pid; });
  REQUIRE(srun_pid > 1);
  CHECK(process_state_letter(srun_pid) == 0);  // ended and reaped by the step

  std::vector<SignalAttempt> attempts = log.attempts();
  REQUIRE(!attempts.empty());
  CHECK(attempts[0].pid == srun_pid);
  CHECK(attempts[0].signal == SIGTERM);
  CHECK(attempts[0].outcome == SignalOutcome::sent);
  // After srun died of it and was reaped, its PipedChild's group SIGKILL is skipped.
  for (size_t i = 1; i < attempts.size(); ++i) {
    CHECK(attempts[i].pid == srun_pid);
    CHECK(attempts[i].outcome == SignalOutcome::gone);
  }
  CHECK(log.count(SignalOutcome::sent) == 1);
}
