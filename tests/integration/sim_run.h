#pragma once
// One run of the real driver and supervisor (run::submit) over simulated agents
// (sim::FakeCluster), in a temporary DTRAIN_HOME, with the driver's seams open to the test: a
// clock (ScaledClock: long timeouts in a fraction of a second) and the run log writer's hook
// (a stalled file system).

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <doctest/doctest.h>

#include "launcher/base/clock.h"
#include "launcher/sim/fake_cluster.h"
#include "launcher/run/run_driver.h"
#include "launcher/runlog/event_log.h"
#include "tests/integration/dtrain_runner.h"

namespace dtrain::testing {

/// A job spec for `hosts` simulated hosts of `slots` ranks, short heartbeats, plus `extra` YAML.
inline std::string sim_spec(int hosts, int slots, const std::string& extra,
                            const std::string& heartbeat = "{interval: 100ms, timeout: 1s, hang_timeout: 2s}") {
  return "version: 1\nname: sim\nslots_per_host: " + std::to_string(slots) + "\nhosts: ['sim[1-" +
         std::to_string(hosts) + "]']\nworker: {command: [/simulated/train]}\n" + "heartbeat: " + heartbeat +
         "\nstop_grace: 1s\n" + extra;
}

struct SimRun {
  /// `clock_speed` > 1: the driver, supervisor and simulated agents share a ScaledClock that
  /// runs that many times faster than real time.
  explicit SimRun(int64_t clock_speed = 1) : clock(clock_speed), cluster(options_for(clock)) {
    if (clock_speed > 1) seams.clock = &clock;
  }

  ScaledClock clock;
  TempDir home;
  sim::FakeCluster cluster;
  run::DriverSeams seams;  ///< transport is set by submit()
  int exit_code = -1;

  /// Submits `spec` on this thread; `scenario` runs on another once every rank beat 3 steps (or
  /// at once if the run ended before). Every worker then finishes. Returns the exit code.
  int run(const std::string& spec, const std::function<void(sim::FakeCluster&, const std::atomic<bool>& ended)>& scenario) {
    ::setenv("DTRAIN_HOME", home.path.c_str(), 1);
    run::SubmitOptions options;
    options.spec_path = "sim.yaml";
    options.spec_text = spec;
    options.seams = seams;
    options.seams.transport = &cluster.transport();
    std::atomic<bool> ended{false};
    std::thread harness([&] {
      if (wait_until([&] { return ended || cluster.newest_step() >= 3; }, 30000) && !ended) scenario(cluster, ended);
      cluster.finish_all();
    });
    exit_code = run::submit(options);
    ended = true;
    harness.join();
    ::unsetenv("DTRAIN_HOME");
    // Every event the run wrote is in the catalogue with the fields it promises.
    for (const nlohmann::json& event : events()) {
      std::string problem = catalogue_problem(event);
      CHECK_MESSAGE(problem.empty(), problem);
    }
    return exit_code;
  }

  std::string run_dir() const {
    std::string runs = home.path + "/runs";
    for (const auto& entry : std::filesystem::directory_iterator(runs)) return entry.path().string();
    return "";
  }
  std::vector<nlohmann::json> events() const { return read_events(run_dir() + "/events.jsonl"); }

 private:
  static sim::FakeClusterOptions options_for(const ScaledClock& clock) {
    sim::FakeClusterOptions options;
    options.clock = &clock;
    return options;
  }
};

}  // namespace dtrain::testing
