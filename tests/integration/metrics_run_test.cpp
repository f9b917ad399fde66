// Task metrics of real runs of the reference trainer: a known crash (rank 1 of generation 0
// exits 3 after 20 of 60 steps) gives restarts_total 1, the last step 60, and a goodput whose
// parts sum to the wall time and agree with goodput_from_events over events.jsonl; metrics.prom
// and the textfile are promtool-clean; a slow rank (DTRAIN_FAULT_SLOW_RANK) is detected, named
// in straggler.detected and `dtrain status`, and scored on the loopback /metrics endpoint; a
// listen address off loopback is refused before anything starts.

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "launcher/metrics/goodput.h"
#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

const std::string kTrainer = DTRAIN_BINARY_DIR "/cli/dtrain-train";

/// The value of the one sample of `name` in an exposition (labels ignored), or NaN.
double sample_value(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    return std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return std::nan("");
}

/// `promtool check metrics` of a file: "" when clean or when promtool is not installed.
std::string promtool_problems(const std::string& path) {
  if (std::system("promtool --version >/dev/null 2>&1") != 0) {
    MESSAGE("promtool not installed (Debian package prometheus): exposition not linted");
    return "";
  }
  std::string said = path + ".lint";
  int status = std::system(("promtool check metrics < '" + path + "' > '" + said + "' 2>&1").c_str());
  std::string text = read_text(said);
  return status == 0 && text.empty() ? "" : "promtool: " + text;
}

/// GET /metrics from 127.0.0.1:port: the whole reply, or "" when nothing answers.
std::string scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
    std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char chunk[8192];
      for (ssize_t got; (got = ::read(fd, chunk, sizeof chunk)) > 0;) reply.append(chunk, static_cast<size_t>(got));
    }
  }
  ::close(fd);
  return reply;
}

int unused_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof at;
  ::bind(fd, reinterpret_cast<sockaddr*>(&at), size);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &size);
  ::close(fd);
  return ntohs(at.sin_port);
}

}  // namespace

TEST_CASE("a crash and a restart: restarts_total 1, the last step, goodput parts sum to the wall time") {
  DtrainEnv env;
  std::string textfiles = env.dir.path + "/textfile";
  REQUIRE(::mkdir(textfiles.c_str(), 0700) == 0);
  // Rank 1 of generation 0 trains 20 steps (a checkpoint at 10 and 20) and exits 3; rank 0 waits
  // for it at step 21. Generation 1 resumes from the newest checkpoint and trains to step 60.
  std::string script = "if [ \"$DTRAIN_GENERATION\" = 0 ] && [ \"$RANK\" = 1 ]; then \"$0\" --steps 20; exit 3; fi; "
                       "exec \"$0\" --steps 60";
  std::string spec = env.write_spec(
      "job.yaml", "version: 1\nname: metrics-crash\nslots_per_host: 2\n"
                  "worker:\n  command: [/bin/sh, -c, '" + script + "', " + kTrainer + "]\n"
                  "elastic:\n  max_restarts: 2\ncheckpoint:\n  interval_steps: 10\n"
                  "metrics:\n  textfile_dir: " + textfiles + "\n  interval: 1s\n");
  DtrainProcess run = env.run({"submit", spec}, 180'000);
  REQUIRE_MESSAGE(run.exit_code == 0, run.err());
  std::string run_dir = only_run_dir(env);
  std::string run_id = run_id_of(run_dir);

  std::vector<nlohmann::json> events = read_events(run_dir + "/events.jsonl");
  std::vector<nlohmann::json> completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(events_named(events, "generation.stepped").size() == 2);
  std::string prom = read_text(run_dir + "/metrics.prom");
  CHECK(sample_value(prom, "dtrain_restarts_total") == 1);
  CHECK(prom.find("dtrain_restarts_by_kind_total{run=\"" + run_id + "\",kind=\"worker.exit\"} 1\n") != std::string::npos);
  CHECK(sample_value(prom, "dtrain_step") == 60);
  CHECK(sample_value(prom, "dtrain_generation") == 1);
  CHECK(sample_value(prom, "dtrain_checkpoints_total") >= 2);  // 10 and 20 in gen 0 at least, 30..60 in gen 1
  CHECK(prom.find("state=\"succeeded\"") != std::string::npos);
  CHECK(sample_value(prom, "dtrain_recovery_phase_seconds") >= 0);

  // Goodput: the parts sum to the wall time; the live tracker agrees with the events file.
  dtrain::Result<std::vector<dtrain::LoggedEvent>> logged = dtrain::read_logged_events(run_dir + "/events.jsonl");
  REQUIRE(logged.ok());
  dtrain::metrics::Goodput from_events = dtrain::metrics::goodput_from_events(*logged);
  CHECK(from_events.finished);
  CHECK(from_events.restarts == 1);
  CHECK(from_events.redone_steps == completed[0]["steps_lost"].get<int64_t>());
  CHECK(from_events.productive_seconds + from_events.lost_seconds() == doctest::Approx(from_events.wall_seconds));
  CHECK(from_events.launch_seconds > 0);
  CHECK(from_events.restart_seconds > 0);
  CHECK(from_events.ratio() > 0);
  CHECK(from_events.ratio() < 1);
  double wall = sample_value(prom, "dtrain_goodput_wall_seconds");
  CHECK(wall == doctest::Approx(from_events.wall_seconds).epsilon(0.01));
  CHECK(sample_value(prom, "dtrain_goodput_ratio") == doctest::Approx(from_events.ratio()).epsilon(0.02));
  double parts = sample_value(prom, "dtrain_goodput_productive_seconds");
  std::istringstream lines(prom);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("dtrain_goodput_lost_seconds{", 0) == 0) parts += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  CHECK(parts == doctest::Approx(wall));
  nlohmann::json state = nlohmann::json::parse(read_text(run_dir + "/state.json"), nullptr, false);
  CHECK(state["goodput"]["restarts"] == 1);

  // The same text for node_exporter's textfile collector; both lint clean.
  CHECK(read_text(textfiles + "/dtrain_" + run_id + ".prom") == prom);
  // Readable by node_exporter's own user; the run directory's copy stays private.
  struct stat textfile_info {}, run_copy_info {};
  REQUIRE(::stat((textfiles + "/dtrain_" + run_id + ".prom").c_str(), &textfile_info) == 0);
  CHECK((textfile_info.st_mode & 0777) == 0644);
  REQUIRE(::stat((run_dir + "/metrics.prom").c_str(), &run_copy_info) == 0);
  CHECK((run_copy_info.st_mode & 0077) == 0);
  CHECK(promtool_problems(run_dir + "/metrics.prom") == "");
  check_nothing_left(run_id);
}

TEST_CASE("a slow rank is a straggler: event, dtrain status and the /metrics endpoint name it") {
  DtrainEnv env;
  int port = unused_loopback_port();
  // Rank 2 works 30 ms longer on every step; ranks 0 and 1 wait for it in the all-reduce.
  std::string spec = env.write_spec(
      "job.yaml", "version: 1\nname: metrics-slow\nslots_per_host: 3\n"
                  "worker:\n  command: [" + kTrainer + ", --steps, \"100000\"]\n"
                  "  env:\n    DTRAIN_FAULT_SLOW_RANK: \"2:30\"\n"
                  "metrics:\n  listen: 127.0.0.1:" + std::to_string(port) + "\n  interval: 1s\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string run_dir = only_run_dir(env);
  REQUIRE(!run_dir.empty());
  std::vector<nlohmann::json> detected;
  bool found = wait_until([&] {
    detected = events_named(read_events(run_dir + "/events.jsonl"), "straggler.detected");
    return !detected.empty();
  }, 90'000);
  std::string scraped;
  bool scored = found && wait_until([&] {
    scraped = scrape(port);
    return scraped.find("dtrain_rank_straggler_score{run=\"" + run_id_of(run_dir) +
                        "\",host=\"localhost\",rank=\"2\"} 0.") != std::string::npos;
  }, 10'000);
  // state.json, which status reads, is rewritten on its own cadence (a second or so, later under
  // load): the line may come one write after the event and the scrape.
  std::string status;
  wait_until([&] {
    status = env.run({"status", run_id_of(run_dir)}).out();
    return status.find("stragglers   rank 2 on localhost (score 0.") != std::string::npos;
  }, 10'000);
  ::kill(run.pid, SIGTERM);  // it would train on for minutes
  CHECK(run.wait(60'000));
  REQUIRE_MESSAGE(found, run.err());
  REQUIRE(detected.size() == 1);  // once per rank and generation, and only the slow one
  CHECK(detected[0]["rank"] == 2);
  CHECK(detected[0]["host"] == "localhost");
  CHECK(detected[0]["score"].get<double>() < 0.75);
  CHECK(detected[0]["median_step_ms"].get<double>() >= 25);
  CHECK_MESSAGE(scored, scraped);
  CHECK(scraped.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(scraped.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK_MESSAGE(status.find("stragglers   rank 2 on localhost (score 0.") != std::string::npos, status);
  CHECK(scrape(port).empty());  // the endpoint closed with the supervisor
  check_nothing_left(run_id_of(run_dir));
}

TEST_CASE("metrics.listen off loopback is refused before anything starts") {
  DtrainEnv env;
  std::string spec = env.write_spec("job.yaml", "version: 1\nname: metrics-open\nworker:\n  command: [" + kTrainer +
                                                    "]\nmetrics:\n  listen: 0.0.0.0:9400\n");
  DtrainProcess run = env.run({"submit", spec});
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(run.err().find("metrics.listen: '0.0.0.0:9400' is not a loopback address") != std::string::npos,
                run.err());
  CHECK(env.run_dirs().empty());
}
