// dtrain-sim: the real supervisor and driver (run::submit) over a simulated cluster
// (sim::FakeCluster: N hosts × M ranks that beat at the spec's interval, in this process),
// to measure what one supervisor costs at sizes no test machine has. It injects one fault, lets
// the run recover, ends it, and prints what it measured as one JSON object on stdout:
//
//   dtrain-sim --hosts 2048 --slots 8 --interval 1s --steady 20s --fault host-loss
//
//   dtrain-sim --hosts 16384 --slots 8 --tree on --ssh-setup-ms 200 --fault relay-loss
//
// --tree on: the driver plans its relay tree (spec scale:) over the simulated hosts and the
// simulated relays carry their hosts' streams; --ssh-setup-ms models each SSH session's setup
// (at most --max-parallel at a time per initiator: the supervisor, or each relay), so that
// submit_to_running_ms is a launch time under a stated per-hop latency. relay-loss kills
// sim00001 (a relay in a tree; a plain host when flat).
//
// supervisor_cpu_percent: the process's CPU time minus the simulation thread's, over the steady
// window (every rank beating, before the fault), in % of one core. peak_rss_mb: the whole
// process (the simulation's share is small: a few words per rank). The recovery timings come
// from the run's own events.jsonl.

#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/run/run_driver.h"
#include "launcher/runlog/event_log.h"
#include "launcher/sim/fake_cluster.h"
#include "launcher/events/event.h"

using namespace dtrain;
using nlohmann::json;

namespace {

double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// CPU seconds per thread name (/proc/self/task/*/stat), so that the steady window can say which
/// of the supervisor's threads (loop, run-log writer, state writer, logger) costs what.
std::map<std::string, double> cpu_seconds_by_thread() {
  std::map<std::string, double> by_name;
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::string name = stat.substr(open + 1, close - open - 1);
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    // Fields after the name: state(3) ... utime(14) stime(15).
    for (int index = 3; index <= 15 && rest >> field; ++index) {
      if (index == 14) utime = std::strtod(field.c_str(), nullptr);
      if (index == 15) stime = std::strtod(field.c_str(), nullptr);
    }
    by_name[name] += (utime + stime) / ticks;
  }
  return by_name;
}

double peak_rss_mb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

/// Waits until `condition` holds or `timeout_ms` passes; false on timeout.
template <class Condition>
bool wait_for(Condition condition, int64_t timeout_ms) {
  SystemClock clock;
  int64_t deadline = clock.monotonic_ms() + timeout_ms;
  while (!condition()) {
    if (clock.monotonic_ms() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// The job the simulated cluster runs: `hosts` hosts sim00001.. of `slots` ranks, beating every
/// `interval_ms`, losing a host after 10 silent intervals and a rank after 30.
std::string sim_spec(int hosts, int slots, int64_t interval_ms, const std::string& tree, int fanout, int max_parallel) {
  char width[16];
  std::snprintf(width, sizeof width, "%05d", hosts);
  std::string spec =
      "version: 1\nname: sim\nslots_per_host: " + std::to_string(slots) +
      "\nhosts: ['sim[00001-" + width + "]']\n"
      "worker: {command: [/simulated/train]}\n"
      "elastic: {min_hosts: 1, max_restarts: 3}\n"
      "heartbeat: {interval: " + std::to_string(interval_ms) + "ms, timeout: " + std::to_string(10 * interval_ms) +
      "ms, hang_timeout: " + std::to_string(30 * interval_ms) + "ms}\nstop_grace: 2s\n"
      "ssh: {max_parallel: " + std::to_string(max_parallel) + "}\n"
      "scale: {tree: " + tree + (fanout > 0 ? ", fanout: " + std::to_string(fanout) : std::string()) + "}\n";
  return spec;
}

/// The harness: waits until every rank beats, measures the supervisor over `steady`, injects
/// `fault` and waits for the recovery; into `result`. False when the ranks never got going.
bool measure_then_inject(sim::FakeCluster& cluster, const std::string& fault, int hosts, int slots, Millis steady,
                         const std::atomic<bool>& run_ended, json& result) {
  SystemClock clock;
  // Steady: every rank started and beating (the simulated step counts beats), and the start's
  // backlog (16,384 worker.started events, rank logs, host facts) written: three more beats.
  if (!wait_for([&] { return run_ended || cluster.newest_step() >= 6; }, 600'000) || run_ended) return false;
  double cpu0 = process_cpu_seconds() - cluster.simulation_cpu_seconds();
  std::map<std::string, double> threads0 = cpu_seconds_by_thread();
  int64_t t0 = clock.monotonic_ms();
  int64_t sent0 = cluster.frames_sent();
  std::this_thread::sleep_for(steady);
  double cpu1 = process_cpu_seconds() - cluster.simulation_cpu_seconds();
  int64_t t1 = clock.monotonic_ms();
  double seconds = static_cast<double>(t1 - t0) / 1000.0;
  result["steady_seconds"] = seconds;
  result["supervisor_cpu_percent"] = 100.0 * (cpu1 - cpu0) / seconds;
  json per_thread = json::object();
  for (const auto& [name, cpu] : cpu_seconds_by_thread()) {
    if (name == "fake-cluster") continue;  // the simulation, not the supervisor
    per_thread[name] = 100.0 * (cpu - threads0[name]) / seconds;
  }
  result["cpu_percent_by_thread"] = per_thread;
  result["frames_per_second"] = static_cast<double>(cluster.frames_sent() - sent0) / seconds;
  result["simulation_cpu_seconds"] = cluster.simulation_cpu_seconds();
  char victim_name[32];
  std::snprintf(victim_name, sizeof victim_name, "sim%05d", hosts / 2 + 1);
  std::string victim = victim_name;
  int generation_before = cluster.newest_generation();
  if (fault == "relay-loss") victim = "sim00001";  // the first relay of a tree (relay_tree.cpp)
  if (fault == "host-loss" || fault == "relay-loss") cluster.kill_host(victim);
  else if (fault == "partition") cluster.partition_host(victim);
  else if (fault == "crash") cluster.crash_rank(hosts * slots / 2, 1);
  else if (fault == "hang") cluster.hang_rank(hosts * slots / 2);
  if (fault != "none") {
    result["victim"] = fault == "host-loss" || fault == "relay-loss" || fault == "partition" ? victim
                                                                                             : "rank " + std::to_string(hosts * slots / 2);
    // A run that ended without recovering (exit 5) is waited for no longer.
    bool recovered = wait_for(
        [&] { return run_ended || (cluster.newest_generation() > generation_before && cluster.newest_step() >= 3); }, 600'000);
    result["recovered"] = recovered && cluster.newest_generation() > generation_before && cluster.newest_step() >= 3;
  }
  return true;
}

/// What the run log of the run under `home` says: events written, and the recovery's timeline.
Status add_run_record(const std::string& home, json& result) {
  std::string runs = home + "/runs";
  std::string run_dir;
  for (const auto& entry : std::filesystem::directory_iterator(runs)) run_dir = entry.path().string();
  result["run_dir"] = run_dir;
  Result<std::vector<LoggedEvent>> events = read_logged_events(run_dir + "/events.jsonl");
  if (!events) return events.error();
  int64_t count = 0, first_ms = 0, last_ms = 0, lost_ms = 0, decided_ms = 0, spawned_ms = 0, completed_ms = 0;
  int64_t hosts_lost = 0, running_ms = 0, hosts_reattached = 0;
  for (const LoggedEvent& logged : *events) {
    ++count;
    int64_t ts = logged.wall_ms().value_or(0);
    if (!first_ms) first_ms = ts;
    last_ms = ts;
    const events::Event& event = logged.event;
    if (std::holds_alternative<events::HostLost>(event)) ++hosts_lost;
    if (std::holds_alternative<events::HostReattached>(event)) ++hosts_reattached;
    const auto* state = std::get_if<events::RunState>(&event);
    if (!running_ms && state && state->state == "running") running_ms = ts;
    if (!lost_ms && std::holds_alternative<events::FailureDetected>(event)) lost_ms = ts;
    if (lost_ms && !decided_ms && std::holds_alternative<events::RecoveryStarted>(event)) decided_ms = ts;
    const auto* spawned = std::get_if<events::GenerationSpawned>(&event);
    if (lost_ms && !spawned_ms && spawned && spawned->gen >= 1) spawned_ms = ts;
    if (lost_ms && !completed_ms && std::holds_alternative<events::RecoveryCompleted>(event)) completed_ms = ts;
  }
  result["events"] = count;
  // Every host lost that the harness did not kill: the supervisor's own slowness (a stalled loop
  // stops reading beats and sending pings). Should be 0, or 1 for --fault host-loss/partition.
  result["hosts_lost"] = hosts_lost;
  result["hosts_reattached"] = hosts_reattached;
  result["submit_to_running_ms"] = running_ms ? running_ms - first_ms : -1;
  result["events_per_second"] = last_ms > first_ms ? 1000.0 * static_cast<double>(count) / static_cast<double>(last_ms - first_ms) : 0.0;
  result["events_jsonl_bytes"] = std::filesystem::exists(run_dir + "/events.jsonl")
                                     ? static_cast<int64_t>(std::filesystem::file_size(run_dir + "/events.jsonl"))
                                     : 0;
  if (lost_ms) {
    result["detected_to_decision_ms"] = decided_ms ? decided_ms - lost_ms : -1;
    result["detected_to_spawn_ms"] = spawned_ms ? spawned_ms - lost_ms : -1;
    result["detected_to_first_step_ms"] = completed_ms ? completed_ms - lost_ms : -1;
  }
  return Status::success();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrain-sim: the real supervisor over a simulated cluster (in-process agents)"};
  int hosts = 16;
  int slots = 8;
  std::string interval_text = "1s";
  std::string steady_text = "10s";
  std::string fault = "host-loss";
  std::string home;
  std::string tree = "off";
  int fanout = 0;
  int64_t ssh_setup_ms = 0;
  int max_parallel = 64;
  app.add_option("--hosts", hosts, "simulated hosts")->check(CLI::Range(1, 65536));
  app.add_option("--tree", tree, "scale.tree of the spec: off (every host direct), on (relays), auto")
      ->check(CLI::IsMember({"off", "on", "auto"}));
  app.add_option("--fanout", fanout, "scale.fanout (0: the default, about sqrt(hosts))")->check(CLI::Range(0, 65536));
  app.add_option("--ssh-setup-ms", ssh_setup_ms, "modelled cost of one SSH session's setup (per hop)")
      ->check(CLI::Range(int64_t{0}, int64_t{600'000}));
  app.add_option("--max-parallel", max_parallel, "ssh.max_parallel: session setups at once per initiator")
      ->check(CLI::Range(1, 100'000));
  app.add_option("--slots", slots, "ranks per host")->check(CLI::Range(1, 64));
  app.add_option("--interval", interval_text, "heartbeat.interval of the spec (every rank beats once per interval)");
  app.add_option("--steady", steady_text, "how long every rank beats before the fault (the measured window)");
  app.add_option("--fault", fault, "host-loss, relay-loss, partition, crash, hang or none")
      ->check(CLI::IsMember({"host-loss", "relay-loss", "partition", "crash", "hang", "none"}));
  app.add_option("--home", home, "DTRAIN_HOME for the run log (default: a new directory under /tmp)");
  CLI11_PARSE(app, argc, argv);

  Result<Millis> interval = parse_duration(interval_text);
  Result<Millis> steady = parse_duration(steady_text);
  if (!interval || !steady) {
    std::fprintf(stderr, "dtrain-sim: --interval/--steady: %s\n",
                 (!interval ? interval.error() : steady.error()).message.c_str());
    return 2;
  }
  if (home.empty()) {
    char pattern[] = "/tmp/dtrain-sim-XXXXXX";
    if (!::mkdtemp(pattern)) return 3;
    home = pattern;
  }
  ::setenv("DTRAIN_HOME", home.c_str(), 1);
  // The supervisor raises its open-file limit for the hosts itself (RunDriver::open_run).

  int64_t interval_ms = interval->count();
  std::string spec = sim_spec(hosts, slots, interval_ms, tree, fanout, max_parallel);

  sim::FakeClusterOptions options;
  options.step_ms = interval_ms;
  options.ssh_setup_ms = ssh_setup_ms;
  options.max_parallel = max_parallel;
  sim::FakeCluster cluster(options);
  run::SubmitOptions submit;
  submit.spec_path = "sim.yaml";
  submit.spec_text = spec;
  submit.seams.transport = &cluster.transport();
  submit.seams.relay_over_transport = tree != "off";

  SystemClock clock;
  json result = {{"hosts", hosts}, {"slots", slots}, {"ranks", hosts * slots}, {"interval_ms", interval_ms},
                 {"fault", fault}, {"tree", tree}, {"fanout", fanout}, {"ssh_setup_ms", ssh_setup_ms},
                 {"max_parallel", max_parallel}};
  std::atomic<bool> harness_failed{false}, run_ended{false};
  std::thread harness([&] {
    if (!measure_then_inject(cluster, fault, hosts, slots, *steady, run_ended, result)) harness_failed = true;
    cluster.finish_all();
  });

  int64_t started = clock.monotonic_ms();
  int code = run::submit(submit);
  run_ended = true;
  harness.join();
  result["exit_code"] = code;
  result["run_seconds"] = static_cast<double>(clock.monotonic_ms() - started) / 1000.0;
  result["peak_rss_mb"] = peak_rss_mb();
  result["harness_failed"] = harness_failed.load();

  // The run's own record: events written, and the recovery's timeline.
  if (Status recorded = add_run_record(home, result); !recorded) {
    std::fprintf(stderr, "dtrain-sim: %s\n", recorded.error().message.c_str());
    return 3;
  }
  std::printf("%s\n", result.dump().c_str());
  return code;
}
