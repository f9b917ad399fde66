// dtrain report's parts on hand-made run directories: HTML escaping (nothing from the run dir
// can open a tag or break an attribute), the Chrome trace's shape, downsampling (curves and heat
// map stay within their caps; a straggler stands out in any rank block), and the readers of
// metrics.jsonl and hosts/*.json (damaged lines skipped and counted, never a crash).

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "launcher/report/downsample.h"
#include "launcher/report/html_report.h"
#include "launcher/report/report_files.h"
#include "launcher/report/run_record.h"
#include "launcher/report/timeline.h"
#include "launcher/report/trace_json.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::report;
using dtrain::testing::TempDir;
using nlohmann::json;

namespace {

std::string ts(int64_t offset_ms) {
  // 2026-12-01T10:00:00.000Z + offset
  int64_t ms = 1796119200000 + offset_ms;
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000));
  return buffer;
}

std::string event(int64_t at, json body) {
  json line = {{"ts", ts(at)}};
  line.update(body);
  return line.dump() + "\n";
}

/// A small run directory: 2 hosts × 2 ranks, a crash of rank 1, a hang of rank 2 and the loss
/// of host "h<b>2" (a name with markup in it), two recoveries, checkpoints and metrics.
std::string make_run(const TempDir& dir, const std::string& second_host = "h<b>2") {
  std::string run = dir.path + "/demo-20261201-100000-abcd";
  std::filesystem::create_directories(run + "/hosts");
  std::string log = "{\"dtrain_events\":1,\"run_id\":\"demo\",\"created\":\"" + ts(0) + "\"}\n";
  log += event(0, {{"ev", "run.submitted"}, {"run_id", "demo"}, {"name", "demo"}, {"spec", "/x/demo.yaml"},
                   {"hosts", {"h1", second_host}}, {"world_size", 4}, {"dtrain_version", "0.1.0"}, {"supervisor_pid", 1}});
  auto generation = [&](int gen, int64_t at, std::vector<std::string> hosts) {
    log += event(at, {{"ev", "plan.generation"}, {"gen", gen}, {"world_size", 4}, {"data", 4}, {"tensor", 1},
                      {"pipeline", 1}, {"grad_accum", 1}, {"resume_step", -1}, {"hosts", hosts}});
    log += event(at + 5, {{"ev", "generation.spawned"}, {"gen", gen}, {"master_addr", "h1"}, {"master_port", 1},
                          {"backend", "gloo"}, {"resume_step", -1}});
    for (int rank = 0; rank < 4; ++rank) {
      log += event(at + 10, {{"ev", "worker.started"}, {"gen", gen}, {"rank", rank}, {"host", hosts[rank / 2 % hosts.size()]},
                             {"local_rank", rank % 2}, {"pid", 100 + rank}});
    }
    log += event(at + 40, {{"ev", "comm.ready"}, {"gen", gen}, {"ranks", 4}, {"ms_since_spawn", 35}});
  };
  auto recovered = [&](int gen, int64_t at, const std::string& kind) {
    log += event(at, {{"ev", "recovery.completed"}, {"gen", gen}, {"kind", kind}, {"cause", {{"host", "h1"}, {"detail", "x"}}},
                      {"phases", {{"detect_ms", 5}, {"stop_ms", 20}, {"replan_ms", 1}, {"spawn_ms", 30}, {"rendezvous_ms", 40},
                                  {"first_step_ms", 10}, {"total_ms", 106}}},
                      {"resume_step", 100}, {"last_step", 120}, {"steps_lost", 20}, {"world_size", 4}});
  };
  generation(0, 100, {"h1", second_host});
  log += event(500, {{"ev", "checkpoint.committed"}, {"gen", 0}, {"rank", 0}, {"host", "h1"}, {"step", 100},
                     {"bytes", 1000}, {"seconds", 0.01}});
  log += event(1000, {{"ev", "worker.exit"}, {"gen", 0}, {"rank", 1}, {"host", "h1"}, {"pid", 101}, {"signal", "SIGKILL"}});
  log += event(1001, {{"ev", "failure.detected"}, {"gen", 0}, {"kind", "worker.exit"}, {"host", "h1"}, {"rank", 1},
                      {"detail", "killed by <SIGKILL> & \"quoted\""}});
  log += event(1002, {{"ev", "recovery.started"}, {"gen", 0}, {"cause", {{"host", "h1"}, {"rank", 1}, {"detail", "killed"}}},
                      {"restarts", 1}, {"action", "restart"}, {"why", "restart 1"}});
  log += event(1010, {{"ev", "resources.released"}, {"gen", 0}, {"host", "h1"}, {"killed", {100}}, {"remaining", 0}, {"ms", 8}});
  generation(1, 1020, {"h1", second_host});
  recovered(1, 1110, "worker.exit");
  log += "{\"ts\": 12, this line is damaged\n";
  log += event(3000, {{"ev", "hang_timeout.changed"}, {"gen", 1}, {"hang_timeout_ms", 1500}, {"checkpoint_timeout_ms", 600000},
                      {"progress_window_ms", 3000}, {"basis", "step time"}, {"factor", 5}, {"longest_step_ms", 300}});
  log += event(4000, {{"ev", "worker.hang"}, {"rank", 2}, {"host", second_host}, {"pid", 102}, {"step", 300},
                      {"phase", "train"}, {"silent_ms", 2000}});
  log += event(4001, {{"ev", "failure.detected"}, {"gen", 1}, {"kind", "worker.hang"}, {"host", second_host}, {"rank", 2},
                      {"detail", "no step progress for 2s"}});
  generation(2, 4100, {"h1", second_host});
  recovered(2, 4200, "worker.hang");
  log += event(6000, {{"ev", "host.lost"}, {"host", second_host}, {"reason", "connection closed"}, {"was_connected", true},
                      {"silent_ms", 1000}});
  log += event(6001, {{"ev", "failure.detected"}, {"gen", 2}, {"kind", "host.lost"}, {"host", second_host},
                      {"detail", "connection closed"}});
  generation(3, 6100, {"h1"});
  recovered(3, 6200, "host.lost");
  log += event(8000, {{"ev", "run.finished"}, {"state", "succeeded"}, {"exit_code", 0}, {"restarts", 3},
                      {"generations", 4}, {"duration_ms", 8000}});
  std::ofstream(run + "/events.jsonl") << log;

  std::string metrics;
  for (int i = 0; i < 40; ++i) {
    json ranks = json::array();
    for (int rank = 0; rank < 4; ++rank) {
      ranks.push_back({{"rank", rank}, {"step", i * 10}, {"loss", 3.0 - i * 0.05}, {"step_ms", rank == 3 ? 40.0 : 10.0}});
    }
    metrics += json({{"ts", ts(200 + i * 200)}, {"gen", i * 200 < 1000 ? 0 : 1}, {"ranks", ranks}}).dump() + "\n";
  }
  metrics += "not json\n";
  metrics += json({{"ts", ts(500)}, {"hosts", {{{"host", "h1"}, {"cpu_percent", 55.5}, {"gpus", {{{"util", 90}}}}}}}}).dump() + "\n";
  std::ofstream(run + "/metrics.jsonl") << metrics;
  std::ofstream(run + "/hosts/h1.json") << json({{"host", "h1"}, {"version", "0.1.0"},
                                                 {"facts", {{"cpus", 8}, {"memory_mb", 1024}, {"topology", "GPU0 X <NV4>"},
                                                            {"gpus", {{{"index", 0}, {"name", "H100 <sxm>"}}}}}}}).dump();
  std::ofstream(run + "/hosts/broken.json") << "{";
  std::ofstream(run + "/state.json") << json({{"version", 1}, {"state", "succeeded"}}).dump();
  return run;
}

}  // namespace

TEST_CASE("html_escape: markup, quotes, control bytes and invalid UTF-8 cannot leave the text") {
  CHECK(html_escape("<script>alert('x')</script>") == "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
  CHECK(html_escape("a & \"b\"") == "a &amp; &quot;b&quot;");
  CHECK(html_escape("line\nnext\ttab") == "line\nnext\ttab");
  CHECK(html_escape(std::string("nul\0bell\a", 9)) == "nul\xEF\xBF\xBD" "bell\xEF\xBF\xBD");
  CHECK(html_escape("caf\xC3\xA9 \xE2\x86\x92") == "caf\xC3\xA9 \xE2\x86\x92");  // valid UTF-8 passes
  CHECK(html_escape("\xC3") == "\xEF\xBF\xBD");                                  // truncated
  CHECK(html_escape("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  CHECK(html_escape("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  CHECK(html_escape("\xFF<") == "\xEF\xBF\xBD&lt;");
}

TEST_CASE("the report of a run with a crash, a hang and a host loss: each in the timeline, every run-dir string escaped") {
  TempDir dir;
  std::string run = make_run(dir);
  Result<RunRecord> record = load_run_record(run);
  REQUIRE(record.ok());
  CHECK(record->skipped_event_lines == 1);
  CHECK(record->skipped_metrics_lines == 1);
  CHECK(record->training.size() == 40);
  REQUIRE(record->resources.size() == 1);
  CHECK(record->resources[0].values.at("cpu_percent") == doctest::Approx(55.5));
  CHECK(record->resources[0].values.at("gpus.0.util") == doctest::Approx(90));
  REQUIRE(record->hosts.size() == 1);  // broken.json is a problem, not a host
  CHECK(record->hosts[0].gpus.at(0).name == "H100 <sxm>");

  Timeline timeline = build_timeline(*record);
  CHECK(timeline.generations.size() == 4);
  CHECK(timeline.recoveries.size() == 3);
  std::set<std::string> kinds;
  for (const Mark& mark : timeline.marks) kinds.insert(mark_kind_name(mark.kind));
  for (const char* kind : {"crash", "hang", "host-lost", "detected", "stop", "replan", "spawn", "rendezvous", "first-step",
                           "checkpoint", "finished"}) {
    CHECK_MESSAGE(kinds.count(kind), kind);
  }
  // A hang and a lost host are drawn where the silence began, not where it was noticed.
  for (const Mark& mark : timeline.marks) {
    if (mark.kind == MarkKind::hang) CHECK(mark.wall_ms == timeline.start_ms + 4001 - 2000);
    if (mark.kind == MarkKind::host_lost) CHECK(mark.wall_ms == timeline.start_ms + 6001 - 1000);
  }

  std::string html = render_html(*record, timeline);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("h<b>2") == std::string::npos);
  CHECK(html.find("h&lt;b&gt;2") != std::string::npos);
  CHECK(html.find("killed by &lt;SIGKILL&gt; &amp; &quot;quoted&quot;") != std::string::npos);
  CHECK(html.find("H100 &lt;sxm&gt;") != std::string::npos);
  CHECK(html.find("GPU0 X &lt;NV4&gt;") != std::string::npos);
  for (const char* kind : {"crash", "hang", "host-lost"}) {
    CHECK(html.find(std::string("class=\"mark\" data-kind=\"") + kind + "\"") != std::string::npos);
  }
  // Sections in the order a reader needs them: outcome first.
  size_t at = 0;
  for (const char* id : {"outcome", "plan", "timeline", "curves", "heatmap", "checkpoints", "recovery", "goodput", "resources", "problems"}) {
    size_t found = html.find(std::string("<section id=\"") + id + "\"");
    CHECK_MESSAGE(found != std::string::npos, id);
    CHECK_MESSAGE(found >= at, id);
    at = found;
  }
  CHECK(html.find("skipped a corrupt line") != std::string::npos);  // what was left out is said
  // The hang timeout in force: state.json has none here, so the newest hang_timeout.changed.
  CHECK(html.find("<th>hang timeout</th><td>1.5s auto (5 x longest step 300ms); checkpoint save 10m, progress window "
                  "3s · set 1 time(s) (hang_timeout.changed)</td>") != std::string::npos);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  // The slowest rank (3, 4 × the others) tops the straggler table.
  CHECK(html.find("<table id=\"slowest\"><tr><th>slowest</th><th>mean step time</th><th>× median</th></tr><tr><td>rank 3</td>") !=
        std::string::npos);
}

TEST_CASE("timeline.json: Chrome trace events with name, ph, ts, pid, tid - spans have a duration - a process per host") {
  TempDir dir;
  std::string run = make_run(dir);
  Result<ReportFiles> files = write_report(run);
  REQUIRE(files.ok());
  CHECK(files->html_path == std::filesystem::absolute(run).string() + "/report.html");
  CHECK(files->skipped_lines == 2);
  json trace = json::parse(std::ifstream(files->trace_path), nullptr, false);
  REQUIRE(!trace.is_discarded());
  REQUIRE(trace["traceEvents"].is_array());
  std::set<std::string> process_names;
  int spans = 0, instants = 0;
  for (const json& entry : trace["traceEvents"]) {
    REQUIRE(entry.contains("name"));
    REQUIRE(entry["ph"].is_string());
    REQUIRE(entry["pid"].is_number_integer());
    REQUIRE(entry["tid"].is_number_integer());
    std::string phase = entry["ph"];
    if (phase == "M") {
      if (entry["name"] == "process_name") process_names.insert(entry["args"]["name"].get<std::string>());
      continue;
    }
    REQUIRE(entry["ts"].is_number_integer());
    CHECK(entry["ts"].get<int64_t>() >= 0);
    if (phase == "X") {
      ++spans;
      REQUIRE(entry["dur"].is_number_integer());
      CHECK(entry["dur"].get<int64_t>() >= 0);
    } else {
      CHECK(phase == "i");
      ++instants;
    }
  }
  CHECK(process_names.count("h1"));
  CHECK(process_names.count("h<b>2"));  // JSON carries it as it is: no HTML here
  CHECK(spans >= 16);                   // 4 generations × 4 ranks, and more
  CHECK(instants > 0);
  CHECK(trace.dump().find("\"name\":\"host-lost\"") != std::string::npos);
}

TEST_CASE("bucket_series: at most max buckets, each with the min, mean and max of its points") {
  std::vector<Point> points;
  for (int i = 0; i < 10000; ++i) points.push_back({static_cast<double>(i), static_cast<double>(i % 100)});
  points.push_back({5.0, NAN});
  std::vector<Bucket> buckets = bucket_series(points, 50);
  REQUIRE(buckets.size() == 50);
  size_t counted = 0;
  for (const Bucket& bucket : buckets) {
    CHECK(bucket.min == 0);
    CHECK(bucket.max == 99);
    CHECK(bucket.mean == doctest::Approx(49.5).epsilon(0.02));
    counted += bucket.count;
  }
  CHECK(counted == 10000);  // every finite point, once
  CHECK(bucket_series({{1, 2}, {0, 1}}, 50).size() == 2);  // fewer points than buckets: one each
  CHECK(bucket_series({{1, 2}, {0, 1}}, 50)[0].x0 == 0);   // in x order
  CHECK(bucket_series({}, 50).empty());
}

TEST_CASE("heat map: 16,384 ranks fit the row cap and a straggler's block is the slowest row") {
  std::vector<TrainingSample> samples;
  for (int i = 0; i < 500; ++i) {
    TrainingSample sample;
    sample.wall_ms = 1000 * i;
    sample.summary = true;
    sample.ranks_reporting = 16384;
    sample.spread(&contract::BeatMetrics::step_ms) = Spread{9, 10, 31};
    sample.ranks = {{9000, i, {.step_ms = 31.0}}};  // the one outlier
    samples.push_back(sample);
  }
  HeatMap map = step_time_heat_map(samples, 16384, 64, 120);
  CHECK(map.rows.size() == 64);
  CHECK(map.columns == 120);
  CHECK(map.rows.front().first_rank == 0);
  CHECK(map.rows.back().last_rank == 16383);
  size_t slowest = 0;
  for (size_t row = 0; row < map.rows.size(); ++row) {
    if (map.at(row, 7) > map.at(slowest, 7)) slowest = row;
  }
  CHECK(map.rows[slowest].first_rank <= 9000);
  CHECK(map.rows[slowest].last_rank >= 9000);
  CHECK(map.at(slowest, 7) == doctest::Approx(31));
  CHECK(map.at((slowest + 1) % 64, 7) == doctest::Approx(10));  // the others at the median
}

TEST_CASE("heat map: a damaged world size or rank cannot size the arrays past kMaxHeatMapRanks") {
  TrainingSample sample;
  sample.wall_ms = 1000;
  sample.ranks = {{0, 1, {.step_ms = 10.0}}, {2'000'000'000, 1, {.step_ms = 99.0}}};
  HeatMap map = step_time_heat_map({sample}, 2'000'000'000, 64, 120);  // would be 2.9 TB unbounded
  REQUIRE_FALSE(map.rows.empty());
  CHECK(map.rows.back().last_rank == kMaxHeatMapRanks - 1);
  CHECK(map.at(0, 0) == doctest::Approx(10));
  // World size unknown (0): the highest rank seen sets it, within the same cap.
  HeatMap inferred = step_time_heat_map({sample}, 0, 64, 120);
  REQUIRE_FALSE(inferred.rows.empty());
  CHECK(inferred.rows.back().last_rank == kMaxHeatMapRanks - 1);
}

TEST_CASE("parse_metrics_line: per-rank and summary lines, resources, and what is refused") {
  Result<MetricsLine> ranks = parse_metrics_line(
      R"({"ts":"2026-12-01T10:00:00.000Z","gen":2,"ranks":[{"rank":0,"step":5,"loss":1.5,"step_ms":3},{"rank":"x"}]})");
  REQUIRE(ranks.ok());
  REQUIRE(ranks->training);
  CHECK(ranks->training->generation == 2);
  REQUIRE(ranks->training->ranks.size() == 1);  // the malformed entry is left out
  CHECK(*ranks->training->ranks[0].metrics.loss == 1.5);

  Result<MetricsLine> summary = parse_metrics_line(
      R"({"ts":"2026-12-01T10:00:00.000Z","gen":0,"ranks_reporting":160,"step":{"min":1,"median":2,"max":3},)"
      R"("step_ms":{"min":1,"median":2,"max":"bad"},"outliers":[{"rank":77,"step":1}]})");
  REQUIRE(summary.ok());
  CHECK(summary->training->summary);
  CHECK(summary->training->ranks_reporting == 160);
  CHECK(summary->training->step.has_value());
  CHECK_FALSE(summary->training->spread(&contract::BeatMetrics::step_ms).has_value());  // a spread with a non-number is no spread
  CHECK(summary->training->ranks.at(0).rank == 77);

  CHECK_FALSE(parse_metrics_line("").ok());
  CHECK_FALSE(parse_metrics_line("[1,2]").ok());
  CHECK_FALSE(parse_metrics_line(R"({"ts":"yesterday","ranks":[]})").ok());
  // A line of a kind this reader does not know (a newer writer's) is no error, just nothing.
  Result<MetricsLine> unknown = parse_metrics_line(R"({"ts":"2026-12-01T10:00:00.000Z","host":"h1","note":"no numbers"})");
  REQUIRE(unknown.ok());
  CHECK_FALSE(unknown->training);
  CHECK(unknown->resources.empty());

  // Host resources as the agents report them: per host up to 64 hosts, spreads beyond.
  Result<MetricsLine> hosts = parse_metrics_line(
      R"({"ts":"2026-12-01T10:00:00.000Z","gen":0,"hosts":[{"host":"gpu01","agent_time_ms":5,"cpu_percent":40,)"
      R"("memory_used_mb":900,"workers":[{"gen":0,"rank":0,"pid":9,"cpu_percent":99,"rss_mb":100},)"
      R"({"gen":0,"rank":1,"pid":10,"cpu_percent":97,"rss_mb":120}],"gpus":[{"index":0,"utilization_percent":80,)"
      R"("power_w":300,"temperature_c":70},{"index":1,"utilization_percent":90,"power_w":310,"temperature_c":65}],"gpu_source":"nvml"}]})");
  REQUIRE(hosts.ok());
  REQUIRE(hosts->resources.size() == 1);
  CHECK_FALSE(hosts->resources[0].values.count("agent_time_ms"));
  Result<MetricsLine> spreads = parse_metrics_line(
      R"({"ts":"2026-12-01T10:00:00.000Z","gen":0,"hosts_reporting":128,"host_cpu_percent":{"min":1,"median":2,"max":3},)"
      R"("gpu_power_w":null,"hosts_standing_out":[]})");
  REQUIRE(spreads.ok());
  REQUIRE(spreads->resources.size() == 1);
  CHECK(spreads->resources[0].summary);
  CHECK(spreads->resources[0].hosts_reporting == 128);
  CHECK(spreads->resources[0].values.at("host_cpu_percent.max") == 3);

  // In the page: a list's figures folded per host (GPUs counted, utilisation at its peak, power summed).
  TempDir dir;
  std::string run = make_run(dir);
  std::ofstream(run + "/metrics.jsonl", std::ios::app)
      << R"({"ts":"2026-12-01T10:00:01.000Z","hosts":[{"host":"gpu01","cpu_percent":40,"gpus":[{"index":0,"utilization_percent":80,"power_w":300},{"index":1,"utilization_percent":90,"power_w":310}]}]})"
      << "\n";
  Result<RunRecord> record = load_run_record(run);
  REQUIRE(record.ok());
  std::string html = render_html(*record, build_timeline(*record));
  CHECK(html.find("<th>gpus utilization_percent (max)</th>") != std::string::npos);
  CHECK(html.find("<th>gpus power_w (sum)</th>") != std::string::npos);
  CHECK(html.find("<td class=\"n\">610</td>") != std::string::npos);
}

TEST_CASE("load_run_record: not a run directory is an error that says so, a run without metrics or plans still reports") {
  TempDir dir;
  Result<RunRecord> missing = load_run_record(dir.path);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("not a dtrain run directory") != std::string::npos);

  std::ofstream(dir.path + "/events.jsonl") << "{\"dtrain_events\":1,\"run_id\":\"r\",\"created\":\"" << ts(0) << "\"}\n";
  Result<RunRecord> empty = load_run_record(dir.path);
  REQUIRE(empty.ok());
  Timeline timeline = build_timeline(*empty);
  std::string html = render_html(*empty, timeline);
  CHECK(html.find("No run.finished event") != std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
}

TEST_CASE("the report's Host health: each check that was not ok, the host left out and quarantined, a host the plan did without") {
  TempDir dir;
  std::string run = make_run(dir);
  std::string log;
  log += event(50, {{"ev", "plan.quarantined"},
                    {"hosts", {{{"host", "h9"}, {"reason", "manual: <fans>"}, {"until", "2026-12-08T10:00:00Z"}}}}});
  log += event(60, {{"ev", "host.health"}, {"host", "h3"}, {"moment", "start"}, {"verdict", "fail"}, {"action", "left out"},
                    {"ms", 1003}, {"detail", "h3 failed its health check"},
                    {"checks", {{{"name", "infiniband mlx5_0/1"}, {"verdict", "fail"}, {"message", "port is 1: DOWN"}},
                                {{"name", "checkpoint dir"}, {"verdict", "ok"}, {"message", "writable"}}}}});
  log += event(61, {{"ev", "host.health"}, {"host", "h1"}, {"moment", "start"}, {"verdict", "ok"}, {"action", "admitted"},
                    {"ms", 3}, {"detail", "healthy"}, {"checks", json::array()}});
  log += event(62, {{"ev", "host.quarantined"}, {"host", "h3"}, {"reason", "failed its health check (start)"},
                    {"evidence", {"infiniband mlx5_0/1: port is 1: DOWN"}}, {"duration_ms", 604800000}});
  std::ofstream(run + "/events.jsonl", std::ios::app) << log;
  Result<RunRecord> record = load_run_record(run);
  REQUIRE(record.ok());
  std::string html = render_html(*record, build_timeline(*record));
  CHECK(html.find("<h3 id=\"health\">") != std::string::npos);
  CHECK(html.find("<tr class=\"health-row\" data-host=\"h3\" data-verdict=\"fail\">") != std::string::npos);
  CHECK(html.find("infiniband mlx5_0/1 (fail): port is 1: DOWN") != std::string::npos);
  CHECK(html.find("checkpoint dir (ok)") == std::string::npos);  // only what was not ok
  CHECK(html.find("data-host=\"h1\" data-verdict=\"ok\"") != std::string::npos);
  CHECK(html.find("<p class=\"warn quarantined\" data-host=\"h3\">") != std::string::npos);
  CHECK(html.find("<p class=\"warn planned-without\" data-host=\"h9\">h9 was left out of this run's plan: quarantined in "
                  "the registry until 2026-12-08T10:00:00Z (manual: &lt;fans&gt;)") != std::string::npos);
}
