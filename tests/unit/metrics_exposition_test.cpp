// The Prometheus exposition of a run's task metrics: HELP/TYPE once per family, samples
// together, escaped labels, a run label on every series, per-rank series only up to 64 ranks,
// and `promtool check metrics` finds nothing to say about it.

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "launcher/metrics/prometheus_text.h"
#include "launcher/metrics/task_metrics.h"
#include "tests/skip.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;

namespace {

metrics::TaskSnapshot snapshot_of(int world_size) {
  metrics::TaskSnapshot s;
  s.run_id = "job-20261201-120000-abcd";
  s.name = "job";
  s.state = "running";
  s.generation = 1;
  s.world_size = world_size;
  s.global_batch = 64;
  s.restarts_by_kind = {{"worker.exit", 1}};
  s.checkpoints_committed = 2;
  s.checkpoint_bytes_total = 2048;
  s.last_checkpoint_step = 20;
  s.last_checkpoint_bytes = 1024;
  s.last_checkpoint_seconds = 0.25;
  s.last_recovery_phase_seconds = {{"detect", 0.02}, {"total", 3.5}};
  for (int rank = 0; rank < world_size; ++rank) {
    metrics::RankTaskMetrics r;
    r.rank = rank;
    r.host = rank < world_size / 2 ? "gpu01" : "gpu\"02";
    r.step = 100 + rank % 3;
    r.metrics.step_ms = 200;
    r.metrics.loss = 1.5;
    r.metrics.comm_ms = 50;
    r.straggler_score = rank == 1 ? 0.5 : 1.0;
    s.ranks.push_back(r);
  }
  metrics::HostResourceMetrics host;
  host.host = "gpu01";
  host.cpu_utilisation = 0.5;
  host.gpus.push_back({0, 0.9, 1e9, 300, 70, 0});
  s.hosts.push_back(host);
  s.stragglers = 1;
  s.goodput = metrics::Goodput{};
  s.goodput->wall_seconds = 100;
  s.goodput->productive_seconds = 80;
  s.goodput->launch_seconds = 20;
  return s;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("PrometheusText: families together, HELP and TYPE once, escaped labels, special values") {
  metrics::PrometheusText text;
  text.family("dtrain_a_total", metrics::PrometheusText::Type::counter, "A count\nover lines");
  text.family("dtrain_b", metrics::PrometheusText::Type::gauge, "B");
  text.family("dtrain_empty", metrics::PrometheusText::Type::gauge, "never sampled");
  text.sample("dtrain_a_total", 1, {{"host", "h\"1\\"}});
  text.sample("dtrain_b", NAN);
  text.sample("dtrain_a_total", 2.5, {{"host", "h2"}});
  text.sample("dtrain_b", INFINITY);
  CHECK(text.text() ==
        "# HELP dtrain_a_total A count\\nover lines\n# TYPE dtrain_a_total counter\n"
        "dtrain_a_total{host=\"h\\\"1\\\\\"} 1\ndtrain_a_total{host=\"h2\"} 2.5\n"
        "# HELP dtrain_b B\n# TYPE dtrain_b gauge\ndtrain_b NaN\ndtrain_b +Inf\n");
  CHECK(metrics::format_sample_value(0.1) == "0.1");
  CHECK(metrics::format_sample_value(1e21) == "1e+21");
}

TEST_CASE("render_prometheus: run, progress, hosts, ranks up to 64, resources, goodput") {
  std::string text = metrics::render_prometheus(snapshot_of(4));
  CHECK(text.find("dtrain_restarts_total{run=\"job-20261201-120000-abcd\"} 1\n") != std::string::npos);
  CHECK(text.find("dtrain_restarts_by_kind_total{run=\"job-20261201-120000-abcd\",kind=\"worker.exit\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("dtrain_step{run=\"job-20261201-120000-abcd\"} 102\n") != std::string::npos);
  CHECK(text.find("dtrain_samples_per_second{run=\"job-20261201-120000-abcd\"} 320\n") != std::string::npos);
  CHECK(text.find("dtrain_rank_straggler_score{run=\"job-20261201-120000-abcd\",host=\"gpu01\",rank=\"1\"} 0.5\n") !=
        std::string::npos);
  CHECK(text.find("dtrain_host_straggler_score_min{run=\"job-20261201-120000-abcd\",host=\"gpu01\"} 0.5\n") !=
        std::string::npos);
  CHECK(text.find("host=\"gpu\\\"02\"") != std::string::npos);
  CHECK(text.find("dtrain_goodput_ratio{run=\"job-20261201-120000-abcd\"} 0.8\n") != std::string::npos);
  CHECK(text.find("dtrain_goodput_lost_seconds{run=\"job-20261201-120000-abcd\",reason=\"launch\"} 20\n") !=
        std::string::npos);
  CHECK(text.find("dtrain_gpu_power_watts{run=\"job-20261201-120000-abcd\",host=\"gpu01\",gpu=\"0\"} 300\n") !=
        std::string::npos);
  CHECK(count(text, "# TYPE dtrain_rank_step gauge") == 1);
  CHECK(count(text, "\ndtrain_rank_step{") == 4);

  std::string large = metrics::render_prometheus(snapshot_of(metrics::kPerRankLabelLimit + 1));
  CHECK(large.find("dtrain_rank_") == std::string::npos);  // per host only beyond 64 ranks
  CHECK(count(large, "\ndtrain_host_ranks{") == 2);
}

TEST_CASE("promtool check metrics finds nothing in the exposition") {
  if (std::system("promtool --version >/dev/null 2>&1") != 0) {
    testing::skip_test("promtool is not installed (Debian package prometheus)");
  }
  testing::TempDir dir;
  std::string path = dir.write("metrics.prom", metrics::render_prometheus(snapshot_of(4)));
  std::string command = "promtool check metrics < " + path + " > " + dir.path + "/lint.txt 2>&1";
  int status = std::system(command.c_str());
  std::ifstream lint(dir.path + "/lint.txt");
  std::stringstream said;
  said << lint.rdbuf();
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, said.str());
  CHECK_MESSAGE(said.str().empty(), said.str());
}
