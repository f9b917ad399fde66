// The workers' output on the terminal the job was started from, as torchrun --tee and mpirun
// --tag-output show it: `dtrain run` prints every rank's lines prefixed "[rank N] " (stdout on
// stdout, stderr on stderr), --output chooses whose, `dtrain submit --follow` does the same for a
// spec, and on a real terminal (a tmux pane) the live status line stays one line under them.

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

/// Two lines on stdout and one on stderr per rank; the rank is in the text so that a prefix on
/// the wrong rank's line shows.
constexpr const char* kHelloScript = R"(import os, sys
rank = os.environ["RANK"]
print("hello from " + rank, flush=True)
print("warn from " + rank, file=sys.stderr, flush=True)
print("bye from " + rank, flush=True)
)";

size_t count_of(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

}  // namespace

TEST_CASE("dtrain run -n 2: both ranks' lines on our stdout and stderr, prefixed, also in the rank logs") {
  DtrainEnv env;
  write_text(env.dir.path + "/hello.py", kHelloScript);
  DtrainProcess process = env.run({"run", "-n", "2", "hello.py"});
  std::string dir = only_run_dir(env);
  std::string out = process.out(), err = process.err();
  REQUIRE_MESSAGE(process.exit_code == 0, err);
  for (const char* rank : {"0", "1"}) {
    CAPTURE(rank);
    CHECK_MESSAGE(count_of(out, std::string("[rank ") + rank + "] hello from " + rank + "\n") == 1, out);
    CHECK(count_of(out, std::string("[rank ") + rank + "] bye from " + rank + "\n") == 1);
    CHECK_MESSAGE(count_of(err, std::string("[rank ") + rank + "] warn from " + rank + "\n") == 1, err);
    CHECK(out.find(std::string("warn from ") + rank) == std::string::npos);
    // A rank's own lines keep their order.
    CHECK(out.find(std::string("hello from ") + rank) < out.find(std::string("bye from ") + rank));
    // The rank log has the same lines: the terminal is a copy, not a replacement.
    std::string log = read_text(dir + "/ranks/" + rank + ".log");
    CHECK(log.find(std::string("hello from ") + rank) != std::string::npos);
    CHECK(log.find(std::string("warn from ") + rank) != std::string::npos);
  }
  // The first line says whose output is shown.
  CHECK_MESSAGE(err.find("· output: all 2 ranks") != std::string::npos, err);
  // Every rank shown: the summary has nothing to add about output.
  CHECK(err.find("output shown here") == std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("dtrain run --output rank0 shows rank 0 only and the summary says where the rest is") {
  DtrainEnv env;
  write_text(env.dir.path + "/hello.py", kHelloScript);
  DtrainProcess process = env.run({"run", "--output", "rank0", "-n", "2", "hello.py"});
  std::string dir = only_run_dir(env);
  REQUIRE_MESSAGE(process.exit_code == 0, process.err());
  std::string out = process.out();
  CHECK_MESSAGE(out.find("[rank 0] hello from 0") != std::string::npos, out);
  CHECK(out.find("from 1") == std::string::npos);
  CHECK(process.err().find("from 1") == std::string::npos);
  CHECK(process.err().find("· output: rank 0 of 2 ranks (--output all for every rank)") != std::string::npos);
  CHECK_MESSAGE(out.find("output shown here: rank 0 of 2 ranks (--output all for every rank); every rank's: dtrain "
                         "logs " + run_id_of(dir)) != std::string::npos, out);
  CHECK(read_text(dir + "/ranks/1.log").find("hello from 1") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("dtrain run --output none shows no worker output, and a wrong word is refused before anything starts") {
  DtrainEnv env;
  write_text(env.dir.path + "/hello.py", kHelloScript);
  DtrainProcess quiet = env.run({"run", "--output", "none", "-n", "2", "hello.py"});
  REQUIRE_MESSAGE(quiet.exit_code == 0, quiet.err());
  CHECK(quiet.out().find("hello from") == std::string::npos);
  CHECK(quiet.err().find("warn from") == std::string::npos);
  std::string dir = only_run_dir(env);
  CHECK(read_text(dir + "/ranks/0.log").find("hello from 0") != std::string::npos);

  DtrainProcess wrong = env.run({"run", "--output", "everyone", "-n", "2", "hello.py"});
  CHECK(wrong.exit_code == 2);
  CHECK_MESSAGE(wrong.err().find("--output 'everyone': write all, rank0, none or auto") != std::string::npos, wrong.err());
  CHECK(env.run_dirs().size() == 1);  // nothing started
}

TEST_CASE("torchrun's output options map onto --output: a ranks filter of 0, redirects to files, a tee") {
  DtrainEnv env;
  write_text(env.dir.path + "/hello.py", kHelloScript);
  DtrainProcess filtered = env.run({"run", "--local-ranks-filter", "0", "-n", "2", "hello.py"});
  REQUIRE_MESSAGE(filtered.exit_code == 0, filtered.err());
  CHECK(filtered.out().find("[rank 0] hello from 0") != std::string::npos);
  CHECK(filtered.out().find("hello from 1") == std::string::npos);
  CHECK_MESSAGE(filtered.err().find("--local-ranks-filter 0: shown here as --output rank0") != std::string::npos,
                filtered.err());

  DtrainProcess redirected = env.run({"run", "--redirects", "3", "-n", "2", "hello.py"});
  REQUIRE_MESSAGE(redirected.exit_code == 0, redirected.err());
  CHECK(redirected.out().find("hello from") == std::string::npos);
  CHECK(redirected.err().find("--redirects 3: shown here as --output none") != std::string::npos);

  // --output given wins over torchrun's options, and says so.
  DtrainProcess explicit_choice = env.run({"run", "--tee", "3", "--output", "rank0", "-n", "2", "hello.py"});
  REQUIRE_MESSAGE(explicit_choice.exit_code == 0, explicit_choice.err());
  CHECK(explicit_choice.out().find("hello from 1") == std::string::npos);
  CHECK(explicit_choice.err().find("ignored --tee: --output rank0 decides whose output is shown here") !=
        std::string::npos);
  for (const std::string& dir : env.run_dirs()) check_nothing_left(run_id_of(dir));
}

TEST_CASE("dtrain submit shows no output by default, --follow shows it like dtrain run, --output picks whose") {
  DtrainEnv env;
  write_text(env.dir.path + "/hello.py", kHelloScript);
  std::string spec = env.write_spec("job.yaml",
                                    "version: 1\nname: hello\nslots_per_host: 2\nworker:\n"
                                    "  command: [python3, -u, hello.py]\n");
  DtrainProcess plain = env.run({"submit", spec});
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err());
  CHECK(plain.out().find("hello from") == std::string::npos);

  DtrainProcess followed = env.run({"submit", "--follow", spec});
  REQUIRE_MESSAGE(followed.exit_code == 0, followed.err());
  CHECK_MESSAGE(followed.out().find("[rank 0] hello from 0") != std::string::npos, followed.out());
  CHECK(followed.out().find("[rank 1] hello from 1") != std::string::npos);
  CHECK(followed.err().find("[rank 1] warn from 1") != std::string::npos);

  DtrainProcess rank0 = env.run({"submit", "--output", "rank0", spec});
  REQUIRE_MESSAGE(rank0.exit_code == 0, rank0.err());
  CHECK(rank0.out().find("[rank 0] hello from 0") != std::string::npos);
  CHECK(rank0.out().find("hello from 1") == std::string::npos);

  DtrainProcess wrong = env.run({"submit", "--output", "loud", spec});
  CHECK(wrong.exit_code == 2);
  CHECK_MESSAGE(wrong.err().find("--output 'loud': write all, rank0, none or auto") != std::string::npos, wrong.err());
  for (const std::string& dir : env.run_dirs()) check_nothing_left(run_id_of(dir));
}

TEST_CASE("on a terminal (tmux): ranks' lines above one live status line, which never breaks a line") {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) skip_test("tmux is not installed (apt install tmux)");
  DtrainEnv env;
  // Each rank prints, then waits for the test to let it go: the capture is taken while the
  // status line is live, without guessing how long anything takes.
  write_text(env.dir.path + "/wait.py", R"(import os, time
rank = os.environ["RANK"]
print("before the wait from " + rank, flush=True)
while not os.path.exists("release"):
    time.sleep(0.05)
print("after the wait from " + rank, flush=True)
)");
  std::string socket = env.dir.path + "/tmux.sock";
  std::string tmux = "tmux -u -S '" + socket + "' ";
  std::string command = "cd '" + env.dir.path + "' && DTRAIN_HOME='" + env.home() + "' '" + DTRAIN_EXE +
                        "' run -n 2 --set heartbeat.interval=200ms wait.py; echo \"EXIT=$?\"; sleep 600";
  REQUIRE(std::system((tmux + "-f /dev/null new-session -d -x 160 -y 40 \"" + command + "\"").c_str()) == 0);
  struct KillServer {
    std::string tmux;
    ~KillServer() { (void)std::system((tmux + "kill-server 2>/dev/null").c_str()); }
  } kill_server{tmux};
  auto capture = [&] {
    std::string file = env.dir.path + "/pane.txt";
    (void)std::system((tmux + "capture-pane -p -J -S - > '" + file + "'").c_str());
    return read_text(file);
  };
  std::string pane;
  bool both_waiting = wait_until([&] {
    pane = capture();
    return pane.find("[rank 0] before the wait from 0") != std::string::npos &&
           pane.find("[rank 1] before the wait from 1") != std::string::npos &&
           pane.find("running · gen 0 · 2/2 workers") != std::string::npos;
  }, 60'000);
  REQUIRE_MESSAGE(both_waiting, pane);
  // One status line, on its own line, below the output: no worker line was written into it.
  CHECK_MESSAGE(count_of(pane, "2/2 workers") == 1, pane);
  size_t status_at = pane.find("running · gen 0 · 2/2 workers");
  CHECK(pane.rfind('\n', status_at) > pane.find("before the wait from 1"));
  CHECK(pane.rfind('\n', status_at) > pane.find("before the wait from 0"));
  CHECK(pane.find("[rank", status_at) == std::string::npos);

  write_text(env.dir.path + "/release", "");
  REQUIRE_MESSAGE(wait_until([&] { pane = capture(); return pane.find("EXIT=") != std::string::npos; }, 60'000), pane);
  CHECK_MESSAGE(pane.find("EXIT=0") != std::string::npos, pane);
  CHECK(pane.find("[rank 0] after the wait from 0") != std::string::npos);
  CHECK(pane.find("[rank 1] after the wait from 1") != std::string::npos);
  // The live line was cleared at the end: the summary starts a clean line.
  CHECK_MESSAGE(pane.find("2/2 workersdtrain") == std::string::npos, pane);
  CHECK(pane.find("\ndtrain: run ") != std::string::npos);
  check_nothing_left(run_id_of(only_run_dir(env)));
}
