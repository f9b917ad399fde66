// `dtrain report` on real runs, checked the way a person would look at it: headless Chromium
// loads report.html from disk and its DOM (--dump-dom) must hold each fault in the timeline;
// a screenshot of the page is kept under the build tree (build/test-artefacts/report*.png).
//  - a real local run (dtrain-train on localhost) with a kill -9 and a SIGSTOP: crash and hang
//    in the timeline; `dtrain status --watch` follows the run and ends by itself with it;
//  - the same on the namespace cluster plus a killed host: crash, hang and host loss
//    (build/test-artefacts/report.png, the README's picture);
//  - a 1,000-rank simulated run (sim::FakeCluster) with all three faults: the page stays under
//    a few MB and opens.
// Chromium missing (Debian package chromium): the test is skipped with that reason.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>

#include "launcher/base/child_process.h"
#include "launcher/report/report_files.h"
#include "tests/integration/cluster_job.h"
#include "tests/integration/sim_run.h"
#include "tests/skip.h"

using namespace dtrain;
using namespace dtrain::testing;

namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    for (const char* directory : {"/usr/bin", "/usr/local/bin", "/snap/bin"}) {
      std::string path = std::string(directory) + "/" + name;
      if (::access(path.c_str(), X_OK) == 0) return path;
    }
  }
  return "";
}

/// The chromium to use, or the test is skipped (before it creates anything).
std::string require_chromium() {
  std::string chromium = find_chromium();
  if (chromium.empty()) skip_test("headless Chromium not installed (Debian package chromium): the report's DOM cannot be checked");
  return chromium;
}

/// Headless Chromium on `html` (a file on disk, no server): its DOM after loading, or its
/// screenshot at 1400 × 3000.
std::vector<std::string> chromium_argv(const std::string& chromium, std::vector<std::string> extra, const std::string& html) {
  std::vector<std::string> argv = {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                   "--disable-dev-shm-usage", "--user-data-dir=" + std::filesystem::path(html).parent_path().string() + "/chromium-profile"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("file://" + html);
  return argv;
}

std::string dump_dom(const std::string& chromium, const std::string& html) {
  Result<dtrain::CommandOutput> out = dtrain::run_command(chromium_argv(chromium, {"--dump-dom"}, html), Millis(120000));
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.error().message));
  INFO(out->err.substr(0, 2000));
  REQUIRE(out->exit_code == 0);
  return out->out;
}

/// build/test-artefacts/<name>: kept after the test, for people (and CI) to look at.
std::string screenshot(const std::string& chromium, const std::string& html, const std::string& name) {
  std::string directory = std::string(DTRAIN_BINARY_DIR) + "/test-artefacts";
  std::filesystem::create_directories(directory);
  std::string png = directory + "/" + name;
  std::filesystem::remove(png);
  Result<dtrain::CommandOutput> out =
      dtrain::run_command(chromium_argv(chromium, {"--hide-scrollbars", "--window-size=1400,3000", "--screenshot=" + png}, html),
                  Millis(120000));
  REQUIRE(out.ok());
  CHECK(out->exit_code == 0);
  CHECK(std::filesystem::exists(png));
  CHECK(std::filesystem::file_size(png) > 20000);  // a page, not a blank
  MESSAGE("report screenshot: " << png);
  return png;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// The DOM holds a timeline mark of `kind` (a <g class="mark" data-kind=...> in the SVG).
bool has_mark(const std::string& dom, const std::string& kind) {
  return dom.find("<g class=\"mark\" data-kind=\"" + kind + "\"") != std::string::npos;
}

/// The pid of `rank` in generation `gen`, from its worker.started event ("" until it is there).
int started_pid(const std::vector<nlohmann::json>& events, int gen, int rank) {
  for (const auto& event : events_named(events, "worker.started")) {
    if (event.value("gen", -1) == gen && event.value("rank", -1) == rank) return event.value("pid", 0);
  }
  return 0;
}

std::string local_spec() {
  return "version: 1\nname: report\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"1000000\", --log-every, \"500\"]\n  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 50, keep: 3}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "elastic: {max_restarts: 4}\n"
         "stop_grace: 2s\n";
}

}  // namespace

TEST_CASE("report of a real local run with a crash and a hang: both in the timeline, seen by headless Chromium, and status --watch ends with the run") {
  std::string chromium = require_chromium();
  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("report.yaml", local_spec())});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  // Watched from the start, into a file: one block per refresh (not a terminal).
  DtrainProcess watch = env.start({"status", run_id, "--watch", "--interval", "0.3"});
  auto events = [&] { return dtrain::testing::read_events(dir + "/events.jsonl"); };
  auto recoveries = [&] { return events_named(events(), "recovery.completed").size(); };
  REQUIRE(wait_until([&] { return !events_named(events(), "checkpoint.committed").empty(); }, 60000));

  int crashed = started_pid(events(), 0, 1);
  REQUIRE(crashed > 0);
  REQUIRE(::kill(crashed, SIGKILL) == 0);
  REQUIRE(wait_until([&] { return recoveries() == 1; }, 60000));
  int stopped = started_pid(events(), 1, 0);
  REQUIRE(stopped > 0);
  REQUIRE(::kill(stopped, SIGSTOP) == 0);
  REQUIRE(wait_until([&] { return recoveries() == 2; }, 60000));
  // Two recoveries seen: end the run (a graceful stop), as an operator would. (SIGTERM would be
  // a preemption: a checkpoint first, and the run ends preempted.)
  REQUIRE(wait_until([&] { return started_pid(events(), 2, 0) > 0; }, 30000));
  CHECK(env.run({"stop", run_id}, 60000).exit_code == 0);
  REQUIRE(run.wait(60000));

  // --watch saw the run move and ended by itself once the run had.
  REQUIRE(watch.wait(20000));
  CHECK(watch.exit_code == 0);
  std::string watched = watch.out();
  INFO(watched.substr(watched.size() > 3000 ? watched.size() - 3000 : 0));
  CHECK(count(watched, "dtrain status --watch " + run_id) >= 3);
  CHECK(watched.find("steps/s") != std::string::npos);
  CHECK(watched.find("ETA ") != std::string::npos);
  CHECK(watched.find("of 1000000") != std::string::npos);  // the step count from the spec's --steps
  CHECK(watched.find("last event") != std::string::npos);
  CHECK(watched.find("the run has ended") != std::string::npos);
  CHECK(watched.find("\033[") == std::string::npos);  // no terminal codes into a file

  DtrainProcess report = env.run({"report", run_id}, 60000);
  INFO(report.err());
  REQUIRE(report.exit_code == 0);
  std::string html = dir + "/report.html";
  CHECK(report.out().find(html) != std::string::npos);
  REQUIRE(std::filesystem::exists(html));
  REQUIRE(std::filesystem::exists(dir + "/timeline.json"));
  std::string dom = dump_dom(chromium, html);
  CHECK(dom.find("id=\"timeline-svg\"") != std::string::npos);
  CHECK(has_mark(dom, "crash"));
  CHECK(has_mark(dom, "hang"));
  CHECK(has_mark(dom, "detected"));
  CHECK(has_mark(dom, "first-step"));
  CHECK(dom.find("data-state=\"stopped\"") != std::string::npos);
  CHECK(dom.find("killed by SIGKILL") != std::string::npos);
  CHECK(dom.find("class=\"phase\" data-phase=\"detect\"") != std::string::npos);
  CHECK(dom.find("id=\"goodput-ratio\"") != std::string::npos);
  screenshot(chromium, html, "report-local.png");

  // -o elsewhere: the trace goes beside it.
  std::string elsewhere = env.dir.path + "/out/r.html";
  std::filesystem::create_directories(env.dir.path + "/out");
  CHECK(env.run({"report", dir, "-o", elsewhere}, 60000).exit_code == 0);
  CHECK(std::filesystem::exists(elsewhere));
  CHECK(std::filesystem::exists(env.dir.path + "/out/timeline.json"));
  // No display here: --open says where the file is instead.
  DtrainProcess open = env.run({"report", run_id, "--open"}, 60000);
  CHECK(open.exit_code == 0);
  CHECK(open.out().find("file://" + html) != std::string::npos);

  CHECK(processes_of_run(run_id).empty());
  CHECK(process_gone(stopped));
}

TEST_CASE("report of a cluster run with a crash, a hang and a lost host: each in the timeline (screenshot build/test-artefacts/report.png)") {
  std::string chromium = require_chromium();  // first: a skip exits at once, before any namespace exists
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "report");
  ClusterSpec spec = shrinkable_trainer_job("report", 1000000);
  spec.spares = {4};
  spec.extra = "batch: {global: 24, micro: 2}\nelastic: {min_hosts: 2, max_restarts: 5}\n";
  job.write_spec(spec, 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(50, 90000));
  auto recoveries = [&] { return job.events("recovery.completed").size(); };

  int crashed = started_pid(job.events(), 0, 1);
  REQUIRE(crashed > 0);
  REQUIRE(::kill(crashed, SIGKILL) == 0);  // the hosts share this pid namespace
  REQUIRE(wait_until([&] { return recoveries() == 1; }, 60000));
  int stopped = started_pid(job.events(), 1, 2);
  REQUIRE(stopped > 0);
  REQUIRE(::kill(stopped, SIGSTOP) == 0);
  REQUIRE(wait_until([&] { return recoveries() == 2; }, 60000));
  REQUIRE(cluster.kill(3).status == 0);
  REQUIRE(wait_until([&] { return recoveries() == 3; }, 90000));
  REQUIRE(::kill(job.pid(), SIGTERM) == 0);
  REQUIRE(job.wait(60000));
  INFO(job.err());

  Result<dtrain::CommandOutput> report = dtrain::run_command({DTRAIN_EXE, "report", job.run_dir()}, Millis(60000));
  REQUIRE(report.ok());
  INFO(report->err);
  REQUIRE(report->exit_code == 0);
  std::string html = job.run_dir() + "/report.html";
  std::string dom = dump_dom(chromium, html);
  CHECK(has_mark(dom, "crash"));
  CHECK(has_mark(dom, "hang"));
  CHECK(has_mark(dom, "host-lost"));
  CHECK(dom.find("data-host=\"" + cluster.host(3).name + "\"") != std::string::npos);
  CHECK(dom.find("spares in use: " + cluster.host(4).name) != std::string::npos);
  screenshot(chromium, html, "report.png");
  check_nothing_left(cluster, job);
}

TEST_CASE("report of a 1,000-rank simulated run with a crash, a hang and a lost host stays under a few MB and opens") {
  std::string chromium = require_chromium();
  SimRun sim(10);  // a clock 10 × real time: a 20 s hang_timeout passes in 2 s
  std::string spec = sim_spec(125, 8, "elastic: {max_restarts: 5, min_hosts: 100}\n",
                              "{interval: 1s, timeout: 10s, hang_timeout: 20s}");
  int exit_code = sim.run(spec, [](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    auto recovered_from = [&](int before) {
      return wait_until([&] { return ended || (cluster.newest_generation() > before && cluster.newest_step() >= 3); }, 60000);
    };
    int generation = cluster.newest_generation();
    cluster.crash_rank(500, 9);
    recovered_from(generation);
    generation = cluster.newest_generation();
    cluster.hang_rank(123);
    recovered_from(generation);
    generation = cluster.newest_generation();
    cluster.kill_host("sim60");
    recovered_from(generation);
  });
  CHECK(exit_code == 0);
  std::string dir = sim.run_dir();

  // The binary, given the directory (not an id: this run lives in a DTRAIN_HOME of its own).
  Result<dtrain::CommandOutput> report = dtrain::run_command({DTRAIN_EXE, "report", dir}, Millis(120000));
  REQUIRE(report.ok());
  INFO(report->err);
  REQUIRE(report->exit_code == 0);
  std::string html = dir + "/report.html";
  auto html_bytes = std::filesystem::file_size(html);
  auto trace_bytes = std::filesystem::file_size(dir + "/timeline.json");
  MESSAGE("1,000 ranks: report.html " << html_bytes / 1000 << " kB, timeline.json " << trace_bytes / 1000 << " kB, events.jsonl "
                                     << std::filesystem::file_size(dir + "/events.jsonl") / 1000 << " kB");
  CHECK(html_bytes < 3'000'000);
  CHECK(trace_bytes < 20'000'000);

  std::string dom = dump_dom(chromium, html);
  CHECK(has_mark(dom, "crash"));
  CHECK(has_mark(dom, "hang"));
  CHECK(has_mark(dom, "host-lost"));
  CHECK(dom.find("other hosts</text>") != std::string::npos);  // 125 hosts: the rest share a lane
  CHECK(dom.find("id=\"heatmap-svg\"") != std::string::npos);
  CHECK(count(dom, "<g class=\"heat-row\"") <= 64);
  screenshot(chromium, html, "report-1000-ranks.png");
}
