// `dtrain review` as a platform lead runs it, over a synthetic month: run directories written
// with the real event structs (through EventLog, as the supervisor writes them) and specs with
// an intent, for two tenants — "vision" (a month of runs, a failure recovered within its
// objectives, a drill passed: go) and "nlp" (ten days, a host lost, a recovery past its
// max_recovery, processes left behind, a drill failed: stop) — a quarantine and the registry
// rebuilt by the real binary. Then: --json holds the figures; the HTML page, loaded by headless
// Chromium from disk, has every section (screenshot kept in build/test-artefacts/review.png);
// a period with no runs says so and exits 0; bad input is one line and a non-zero exit.

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "launcher/base/child_process.h"
#include "launcher/base/clock.h"
#include "launcher/events/events.h"
#include "launcher/review/review.h"
#include "launcher/runlog/event_log.h"
#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain;
using namespace dtrain::testing;
using nlohmann::json;

namespace {

constexpr int64_t kMinute = 60 * 1000LL;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;

/// One run directory being written: spec.yaml, then events through the real EventLog, each
/// line stamped with the generation as the supervisor stamps it.
class RunWriter {
 public:
  RunWriter(const std::string& home, const std::string& id, const std::string& spec_yaml, int64_t at)
      : dir_(home + "/runs/" + id), id_(id), at_(at) {
    std::filesystem::create_directories(dir_ + "/ranks");
    write_text(dir_ + "/spec.yaml", spec_yaml);
    Result<EventLog> created = EventLog::create(dir_ + "/events.jsonl", id, at);
    REQUIRE(created.ok());
    log_.emplace(std::move(*created));
  }
  /// Appends `event` (an event struct) `after_ms` after the previous one.
  template <class Event>
  void add(const Event& event, int64_t after_ms = 1000) {
    at_ += after_ms;
    json line = event.to_json();
    if (gen_ >= 0 && !line.contains("gen")) line["gen"] = gen_;
    REQUIRE(log_->append(line, at_).ok());
  }
  /// plan.generation and generation.spawned of generation `gen` on `hosts` (8 GPUs each).
  void generation(int gen, const std::vector<std::string>& hosts) {
    gen_ = gen;
    int world = static_cast<int>(hosts.size()) * 8;
    add(events::PlanGeneration{gen, world, world, 1, 1, 1, gen == 0 ? -1 : 200, hosts});
    add(events::GenerationSpawned{gen, hosts[0], 29500, "nccl", gen == 0 ? -1 : 200, "/ckpt/" + id_});
  }
  void checkpoints(const std::string& host, std::vector<int64_t> steps) {
    for (int64_t step : steps) add(events::CheckpointCommitted{gen_, 0, host, step, 2'000'000'000, 4.5, {}}, 10 * kMinute);
  }
  std::string dir() const { return dir_; }

 private:
  std::string dir_, id_;
  int64_t at_ = 0;
  int gen_ = -1;
  std::optional<EventLog> log_;
};

std::string spec_with_intent(const std::string& tenant) {
  return "version: 1\nname: " + tenant + "-train\ntenant: " + tenant +
         "\nhosts: [gpu01, gpu02, gpu03, gpu04]\nworker:\n  command: [python3, train.py]\n"
         "intent:\n  model: {parameters: 1B, precision: bf16, optimizer: adamw}\n  target_duration: 10h\n"
         "  recovery: {max_recovery: 1m, max_lost: 100 steps, mode: restart}\n";
}

/// The start of a run: submitted, the hosts' facts (8 GPUs each), generation 0.
void start_run(RunWriter& run, const std::string& id, const std::string& tenant, const std::vector<std::string>& hosts) {
  run.add(events::RunSubmitted{id, tenant + "-train", tenant, "alice", run.dir() + "/spec.yaml", hosts, 16, "0.1.0", 4242,
                               "login01", true},
          0);
  json gpus = json::array();
  for (int index = 0; index < 8; ++index) gpus.push_back({{"index", index}, {"name", "H100"}});
  for (const std::string& host : hosts) run.add(events::HostFacts{host, {{"gpus", gpus}}});
  run.generation(0, hosts);
}

void finish_run(RunWriter& run, int restarts) {
  run.add(events::RunFinished{"succeeded", 0, restarts, restarts + 1, 3 * kHour, {}, {}, ""}, kHour);
}

/// A worker that crashed with a traceback, recovered by a restart in 6.35 s, 20 steps lost.
void crash_and_restart(RunWriter& run, const std::string& host) {
  events::WorkerExit exit;
  exit.gen = 0;
  exit.rank = 3;
  exit.host = host;
  exit.pid = 31337;
  exit.code = 1;
  exit.log = run.dir() + "/ranks/3.log";
  exit.tail = {"Traceback (most recent call last):", "  File \"train.py\", line 88, in step",
               "RuntimeError: CUDA error: an illegal memory access was encountered"};
  run.add(exit, 5 * kMinute);
  events::FailureCause cause{events::FailureKind::worker_exit, host, "rank 3 exited with code 1", 3, 3, 31337, 1, {}, {}};
  run.add(events::FailureDetected{cause, 40, "agent"});
  run.add(events::FailureRootCause{3, host, cause.detail}, 0);
  run.add(events::ResourcesReleased{0, "gpu01", {31330, 31331}, 0, 90});
  run.add(events::ResourcesReleased{0, host, {31336, 31337}, 0, 120}, 0);
  run.generation(1, {"gpu01", host});
  json phases = {{"detect_ms", 1200}, {"stop_ms", 800}, {"replan_ms", 50}, {"spawn_ms", 900}, {"rendezvous_ms", 400},
                 {"first_step_ms", 3000}, {"total_ms", 5150}};  // total_ms is no phase (the supervisor writes it)
  run.add(events::RecoveryCompleted{events::FailureKind::worker_exit, cause, phases, 200, 220, 20, 16, 1, "restart", {}}, 7000);
}

/// A host lost: the recovery (a shrink) takes 150 s, two processes stay on gpu03 and gpu04
/// never confirms its release.
void host_lost_and_leftovers(RunWriter& run) {
  run.add(events::HostLost{"gpu03", "silent for 10s", true, 10000}, 5 * kMinute);
  events::FailureCause cause{events::FailureKind::host_lost, "gpu03", "gpu03 silent for 10s", {}, -1, {}, {}, {}, {}};
  run.add(events::FailureDetected{cause, 10000, "supervisor"});
  run.add(events::FailureRootCause{0, "gpu03", cause.detail}, 0);
  run.add(events::ResourcesReleased{0, "gpu03", {}, 2, 5000});
  run.add(events::ResourcesUnconfirmed{{"gpu04"}, "gpu04 did not answer the release"}, 0);
  run.add(events::HostQuarantined{"gpu03", "lost twice in a day", {"host.lost: silent for 10s"}, 7 * kDay});
  run.generation(1, {"gpu01", "gpu02"});
  json phases = {{"detect_ms", 10000}, {"stop_ms", 60000}, {"replan_ms", 100}, {"spawn_ms", 30000},
                 {"rendezvous_ms", 20000}, {"first_step_ms", 29900}};
  run.add(events::RecoveryCompleted{events::FailureKind::host_lost, cause, phases, 200, 280, 80, 16, 1, "shrink", {}}, 150000);
}

json drill_line(const std::string& id, const std::string& run_id, int64_t at, const std::string& verdict,
                const std::vector<std::string>& missed) {
  return {{"ts", format_timestamp_utc(at)}, {"drill_id", id}, {"mode", "live"}, {"run_id", run_id},
          {"verdict", verdict}, {"exit_code", verdict == "pass" ? 0 : 1},
          {"faults", json::array({{{"fault", "kill-rank"}, {"target", "1"}, {"verdict", verdict}}})}, {"missed", missed}};
}

/// The synthetic month, ending a day before now: every run, the drill history and the registry.
void write_month(DtrainEnv& env, int64_t now) {
  int64_t start = now - 36 * kDay;
  std::string home = env.home();
  {
    RunWriter v1(home, "vision-1", spec_with_intent("vision"), start + 1 * kDay);
    start_run(v1, "vision-1", "vision", {"gpu01", "gpu02"});
    v1.checkpoints("gpu01", {100, 200, 300});
    finish_run(v1, 0);
  }
  {
    RunWriter v2(home, "vision-2", spec_with_intent("vision"), start + 15 * kDay);
    start_run(v2, "vision-2", "vision", {"gpu01", "gpu02"});
    v2.checkpoints("gpu01", {100, 200});
    crash_and_restart(v2, "gpu02");
    v2.checkpoints("gpu01", {300, 400});
    json report = drill_line("drill-v", "vision-2", start + 15 * kDay + 2 * kHour, "pass", {});
    report["leftover_pids"] = json::array();
    v2.add(events::DrillVerdict{report});
    finish_run(v2, 1);
  }
  {
    RunWriter v3(home, "vision-3", spec_with_intent("vision"), start + 34 * kDay);
    start_run(v3, "vision-3", "vision", {"gpu01", "gpu02"});
    v3.checkpoints("gpu01", {100});
    finish_run(v3, 0);
  }
  {
    RunWriter n1(home, "nlp-1", spec_with_intent("nlp"), start + 10 * kDay);
    start_run(n1, "nlp-1", "nlp", {"gpu01", "gpu02", "gpu03", "gpu04"});
    n1.checkpoints("gpu01", {100, 200});
    host_lost_and_leftovers(n1);
    json report = drill_line("drill-n", "nlp-1", start + 10 * kDay + 2 * kHour, "fail", {"kill-host:gpu03: recover 150 s > 60 s"});
    report["leftover_pids"] = json::array({4001, 4002});
    n1.add(events::DrillVerdict{report});
    finish_run(n1, 1);
  }
  {
    RunWriter n2(home, "nlp-2", spec_with_intent("nlp"), start + 20 * kDay);
    start_run(n2, "nlp-2", "nlp", {"gpu01", "gpu02"});
    finish_run(n2, 0);
  }
  // The drill history, as `dtrain drill` appends it (header, then one line a drill; one broken).
  write_text(home + "/drills.jsonl",
             json{{"dtrain_drills", 1}}.dump() + "\n" +
                 drill_line("drill-v", "vision-2", start + 15 * kDay + 2 * kHour, "pass", {}).dump() + "\n" +
                 drill_line("drill-n", "nlp-1", start + 10 * kDay + 2 * kHour, "fail",
                            {"kill-host:gpu03: recover 150 s > 60 s"}).dump() + "\n" +
                 "{\"ts\": 12, \"drill_id\": []}\n");
  DtrainProcess rebuilt = env.run({"registry", "rebuild"});
  INFO(rebuilt.err());
  REQUIRE(rebuilt.exit_code == 0);
  CHECK(rebuilt.out().find("5 runs") != std::string::npos);
  DtrainProcess quarantined = env.run({"hosts", "quarantine", "gpu04", "--reason", "release never confirmed", "--for", "7d"});
  INFO(quarantined.err());
  REQUIRE(quarantined.exit_code == 0);
}

const json* tenant_line(const json& review, const std::string& tenant) {
  for (const json& line : review["decision"]["tenants"]) {
    if (line["tenant"] == tenant) return &line;
  }
  return nullptr;
}

bool any_reason(const json& line, const std::string& text) {
  for (const json& reason : line["reasons"]) {
    if (reason.get<std::string>().find(text) != std::string::npos) return true;
  }
  return false;
}

std::string find_chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

/// `file://` URL of a path that may hold spaces.
std::string file_url(const std::string& path) {
  std::string url = "file://";
  for (char c : path) url += c == ' ' ? std::string("%20") : std::string(1, c);
  return url;
}

/// Headless Chromium on `html` with `mode` (--dump-dom, or --screenshot=PNG): its stdout.
std::string chromium(const std::string& browser, const std::string& html, const std::vector<std::string>& mode) {
  std::vector<std::string> argv = {browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                   "--hide-scrollbars", "--window-size=1300,4200",
                                   "--user-data-dir=" + std::filesystem::path(html).parent_path().string() + "/profile"};
  argv.insert(argv.end(), mode.begin(), mode.end());
  argv.push_back(file_url(html));
  Result<CommandOutput> out = run_command(argv, Millis(120000));
  REQUIRE(out.ok());
  INFO(out->err.substr(0, 2000));
  REQUIRE(out->exit_code == 0);
  return out->out;
}

}  // namespace

TEST_CASE("review of a synthetic month: --json figures, two tenants, go and stop with their reasons") {
  DtrainEnv env;
  write_month(env, SystemClock().wall_ms());
  DtrainProcess run = env.run({"review", "--since", "40d", "--json"});
  INFO(run.err());
  REQUIRE(run.exit_code == 0);
  json review = json::parse(run.out(), nullptr, false);
  REQUIRE(review.is_object());
  REQUIRE(review::review_from_json(review).ok());  // the same struct the page is made from
  CHECK(review["no_runs"] == false);
  CHECK(review["current"]["runs"] == 5);
  CHECK(review["current"]["tenants"] == 2);
  CHECK(review["current"]["hosts"] == 4);
  CHECK(review["current"]["gpus"] == 32);
  CHECK(review["current"]["gpu_hours"].get<double>() > 0);
  CHECK(review["current"]["top_failure_causes"].size() == 2);
  CHECK(review["validation"]["drills"].size() == 2);
  CHECK(review["validation"]["failures"].size() == 2);
  CHECK(review["validation"]["recoveries"].size() == 2);
  CHECK(review["validation"]["leftovers"] == 3);  // 2 processes on gpu03, gpu04 unconfirmed, the drill's leftovers
  CHECK(review["skipped_lines"] == 1);             // the broken drills.jsonl line
  // The crash's sample is its rank's traceback, from the worker.exit event.
  bool traceback = false;
  for (const json& failure : review["validation"]["failures"]) {
    if (failure["run_id"] == "vision-2") {
      CHECK(failure["root_cause"] == true);
      traceback = failure["sample"].dump().find("illegal memory access") != std::string::npos;
    }
  }
  CHECK(traceback);
  for (const json& recovery : review["validation"]["recoveries"]) {
    if (recovery["run_id"] == "nlp-1") CHECK(recovery["total_ms"] == 150000);
    if (recovery["run_id"] != "vision-2") continue;
    CHECK(recovery["total_ms"] == 6350);
    REQUIRE(recovery["phases"].size() == 6);
    CHECK(recovery["phases"][0]["name"] == "detect");  // in the order they happen
    CHECK(recovery["phases"][5]["name"] == "first_step");
  }
  for (const json& checkpoint : review["validation"]["checkpoints"]) {
    if (checkpoint["run_id"] != "vision-2") continue;
    CHECK(checkpoint["checkpoints"] == 4);
    CHECK(checkpoint["interval_steps"] == 100);
    CHECK(checkpoint["interval_ms"] == 10 * kMinute);
    CHECK(checkpoint["bytes"] == 2'000'000'000);
    CHECK(checkpoint["restore_ms"] == 3000);
  }

  const json* vision = tenant_line(review, "vision");
  const json* nlp = tenant_line(review, "nlp");
  REQUIRE(vision);
  REQUIRE(nlp);
  INFO(vision->dump(2));
  INFO(nlp->dump(2));
  CHECK((*vision)["verdict"] == "go");
  CHECK((*vision)["data"]["enough"] == true);
  CHECK((*vision)["data"]["days"].get<double>() == doctest::Approx(33.0));
  CHECK((*nlp)["verdict"] == "stop");
  CHECK(any_reason(*nlp, "drill failed: drill-n"));
  CHECK(any_reason(*nlp, "2 processes left on gpu03"));
  CHECK(any_reason(*nlp, "gpu04 never confirmed"));
  CHECK(any_reason(*nlp, "10.0 days of data"));
  CHECK(any_reason(*nlp, "objective missed: run nlp-1: max_recovery"));
  CHECK(review["decision"]["data"]["enough"] == true);  // both tenants together span 33 days

  // Operations: owners, the quarantines (the run's and the one by hand), the audit of both.
  CHECK(review["operations"]["tenants"].size() == 2);
  CHECK(review["operations"]["users"].size() >= 1);
  CHECK(review["operations"]["quarantined"].size() == 2);
  std::set<std::string> categories;
  for (const json& entry : review["operations"]["audit"]) categories.insert(entry["category"].get<std::string>());
  CHECK(categories == std::set<std::string>{"quarantine", "rebuild"});
  for (const review::SectionName& section : review::kSections) CHECK(review["sources"].contains(section.id));

  // One tenant: the other's runs, drills and leftovers are out of scope.
  DtrainProcess vision_only = env.run({"review", "--since", "40d", "--tenant", "vision", "--json"});
  REQUIRE(vision_only.exit_code == 0);
  json scoped = json::parse(vision_only.out(), nullptr, false);
  CHECK(scoped["current"]["runs"] == 3);
  CHECK(scoped["validation"]["drills"].size() == 1);
  CHECK(scoped["validation"]["leftovers"] == 0);
  // Only runs that held gpu03: nlp-1 alone.
  DtrainProcess on_gpu03 = env.run({"review", "--since", "40d", "--hosts", "gpu03", "--json"});
  REQUIRE(on_gpu03.exit_code == 0);
  CHECK(json::parse(on_gpu03.out(), nullptr, false)["current"]["runs"] == 1);
}

TEST_CASE("review page of a synthetic month in headless Chromium: every section, a screenshot kept") {
  std::string browser = find_chromium();
  if (browser.empty()) skip_test("headless Chromium not installed (Debian package chromium): the page cannot be checked");
  DtrainEnv env;
  write_month(env, SystemClock().wall_ms());
  std::string out_dir = env.dir.path + "/review out";  // a path with a space
  std::filesystem::create_directories(out_dir);
  std::string html = out_dir + "/month review.html";
  DtrainProcess run = env.run({"review", "--since", "40d", "-o", html});
  INFO(run.err());
  REQUIRE(run.exit_code == 0);
  CHECK(run.out().find("vision") != std::string::npos);
  CHECK(run.out().find("stop") != std::string::npos);
  std::string page = read_text(html);
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http://") == std::string::npos);  // nothing fetched from anywhere
  CHECK(page.find("https://") == std::string::npos);
  CHECK(page.find(" src=") == std::string::npos);

  std::string dom = chromium(browser, html, {"--dump-dom"});
  for (const char* group : {"current-state", "validation", "decision", "operations"}) {
    CHECK(dom.find(std::string("<h2 id=\"") + group + "\"") != std::string::npos);
  }
  for (const review::SectionName& section : review::kSections) {
    INFO(section.id);
    size_t at = dom.find(std::string("<section id=\"") + section.id + "\">");
    REQUIRE(at != std::string::npos);
    // Each section says its source, when it was generated and its scope.
    size_t end = dom.find("</section>", at);
    std::string text = dom.substr(at, end - at);
    CHECK(text.find("Source: ") != std::string::npos);
    CHECK(text.find(" · generated ") != std::string::npos);
    CHECK(text.find(" · scope ") != std::string::npos);
  }
  CHECK(dom.find("data-verdict=\"go\"") != std::string::npos);
  CHECK(dom.find("data-verdict=\"stop\"") != std::string::npos);
  CHECK(dom.find("illegal memory access") != std::string::npos);
  CHECK(dom.find("data-chart=\"recovery phases\"") != std::string::npos);

  std::string artefacts = std::string(DTRAIN_BINARY_DIR) + "/test-artefacts";
  std::filesystem::create_directories(artefacts);
  std::string png = artefacts + "/review.png";
  std::filesystem::remove(png);
  chromium(browser, html, {"--screenshot=" + png});
  REQUIRE(std::filesystem::exists(png));
  CHECK(std::filesystem::file_size(png) > 20000);  // a page, not a blank
  MESSAGE("review screenshot: " << png);
}

TEST_CASE("review of a period with no runs says so and exits 0, in the page and in the JSON") {
  DtrainEnv env;
  write_month(env, SystemClock().wall_ms());
  DtrainProcess json_run = env.run({"review", "--since", "2020-01-01", "--until", "2020-02-01", "--json"});
  INFO(json_run.err());
  REQUIRE(json_run.exit_code == 0);
  json review = json::parse(json_run.out(), nullptr, false);
  REQUIRE(review.is_object());
  CHECK(review["no_runs"] == true);
  CHECK(review["summary"].get<std::string>().find("no runs in this period") == 0);
  CHECK(review["decision"]["tenants"].empty());
  std::string html = env.dir.path + "/empty.html";
  DtrainProcess page_run = env.run({"review", "--since", "2020-01-01", "--until", "2020-02-01", "-o", html});
  REQUIRE(page_run.exit_code == 0);
  CHECK(page_run.out().find("no runs in this period") != std::string::npos);
  std::string page = read_text(html);
  CHECK(page.find("No runs in this period: nothing to decide.") != std::string::npos);
  CHECK(page.find("<section id=\"verdicts\">") != std::string::npos);
}

TEST_CASE("review of bad input: one line naming what, where and the fix, a non-zero exit, no stack trace") {
  DtrainEnv env;
  DtrainProcess missing = env.run({"review", "--json"});  // no registry yet
  CHECK(missing.exit_code != 0);
  CHECK(missing.err().find(env.home() + "/registry.db") != std::string::npos);
  CHECK(missing.err().find("dtrain registry rebuild") != std::string::npos);
  CHECK(missing.out().empty());

  DtrainProcess since = env.run({"review", "--since", "yesterday"});
  CHECK(since.exit_code == 2);
  CHECK(since.err() == "dtrain review: --since 'yesterday' is not a period start; write days back from now (30d, 1 to "
                       "3650d) or a UTC date (2026-11-01 or 2026-11)\n");
  DtrainProcess backwards = env.run({"review", "--since", "2026-11-01", "--until", "2026-10-01"});
  CHECK(backwards.exit_code == 2);
  CHECK(backwards.err().find("is not after --since") != std::string::npos);

  std::filesystem::create_directories(env.home());
  write_text(env.home() + "/registry.db", std::string(4096, 'x'));  // a damaged registry
  DtrainProcess damaged = env.run({"review"});
  CHECK(damaged.exit_code != 0);
  CHECK(damaged.err().find("registry.db") != std::string::npos);
  CHECK(damaged.err().find("dtrain registry rebuild") != std::string::npos);
  std::string damaged_err = damaged.err();
  CHECK(std::count(damaged_err.begin(), damaged_err.end(), '\n') == 1);
}
