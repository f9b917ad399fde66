// Per-rank peak accelerator memory end to end (issue 27 item 7): an unmodified PyTorch script
// under `dtrain submit` (real python3-torch, real optimizer steps through the bootstrap's hook)
// whose CUDA figure reaches state.json, `dtrain status`, metrics.jsonl, metrics.prom and the
// report. This machine has no GPU, so the script stands in torch.cuda's two calls that the figure
// comes from (is_initialized, max_memory_allocated); everything after them is the real path.

#include <doctest/doctest.h>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;

/// Rank r's peak in the script below: 3 GiB + r MiB.
int64_t peak_of(int rank) { return 3 * kGiB + rank * kMiB; }

}  // namespace

TEST_CASE("peak accelerator memory: torch's figure reaches state.json, status, metrics.jsonl, Prometheus and the report") {
  require_python_module("torch.optim");
  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  write_text(script,
             "import os, time, torch\n"
             "# No GPU here: stand in the two calls dtrain reads the figure from.\n"
             "torch.cuda.is_initialized = lambda: True\n"
             "torch.cuda.max_memory_allocated = lambda device=None: (3 << 30) + int(os.environ['RANK']) * (1 << 20)\n"
             "model = torch.nn.Linear(4, 1)\n"
             "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "for step in range(60):\n"
             "    optimizer.zero_grad()\n"
             "    model(torch.ones(2, 4)).sum().backward()\n"
             "    optimizer.step()\n"
             "    time.sleep(0.05)\n");
  std::string spec = env.write_spec(
      "peak.yaml", "version: 1\nname: peak\nslots_per_host: 2\nworker:\n  command: [/usr/bin/python3, '" + script +
                       "']\nheartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n"
                       "metrics:\n  interval: 1s\n");
  DtrainProcess run = env.run({"submit", spec}, 180'000);
  REQUIRE_MESSAGE(run.exit_code == 0, run.err());
  std::string dir = only_run_dir(env);
  std::string run_id = run_id_of(dir);

  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  REQUIRE(state["ranks"].size() == 2);
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    CHECK(state["ranks"][rank].value("peak_memory_bytes", int64_t{-1}) == peak_of(rank));
  }

  DtrainProcess status = env.run({"status", run_id});
  INFO("dtrain status:\n" << status.out());
  CHECK(status.out().find("PEAK MEM") != std::string::npos);
  CHECK(status.out().find("3.0 GiB") != std::string::npos);

  bool line_has_peak = false;
  for (const nlohmann::json& line : read_events(dir + "/metrics.jsonl")) {
    if (!line.contains("ranks")) continue;
    for (const nlohmann::json& rank : line["ranks"]) {
      if (rank.value("peak_memory_bytes", int64_t{-1}) == peak_of(rank.value("rank", 0))) line_has_peak = true;
    }
  }
  CHECK(line_has_peak);

  std::string prom = read_text(dir + "/metrics.prom");
  INFO("metrics.prom:\n" << prom);
  CHECK(prom.find("dtrain_rank_peak_accelerator_memory_bytes{run=\"" + run_id + "\",host=\"localhost\",rank=\"1\"} " +
                  std::to_string(peak_of(1)) + "\n") != std::string::npos);
  CHECK(prom.find("dtrain_host_peak_accelerator_memory_bytes_max{run=\"" + run_id + "\",host=\"localhost\"} " +
                  std::to_string(peak_of(1)) + "\n") != std::string::npos);

  DtrainProcess report = env.run({"report", run_id}, 60'000);
  REQUIRE_MESSAGE(report.exit_code == 0, report.err());
  std::string html = read_text(dir + "/report.html");
  CHECK(html.find("id=\"peak-memory-bytes-chart\"") != std::string::npos);
  CHECK(html.find("peak accelerator memory") != std::string::npos);
  check_nothing_left(run_id);
}

TEST_CASE("peak accelerator memory: a CPU script reports none, and status shows no column for it") {
  require_python_module("torch.optim");
  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  write_text(script,
             "import time, torch\n"
             "model = torch.nn.Linear(4, 1)\n"
             "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "for step in range(20):\n"
             "    optimizer.step()\n"
             "    time.sleep(0.05)\n");
  std::string spec = env.write_spec(
      "cpu.yaml", "version: 1\nname: cpu\nslots_per_host: 1\nworker:\n  command: [/usr/bin/python3, '" + script +
                      "']\nheartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n");
  DtrainProcess run = env.run({"submit", spec}, 180'000);
  REQUIRE_MESSAGE(run.exit_code == 0, run.err());
  std::string dir = only_run_dir(env);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  REQUIRE(state["ranks"].size() == 1);
  CHECK(state["ranks"][0].value("step", int64_t{0}) > 0);  // the bootstrap beat; only the figure is absent
  CHECK_FALSE(state["ranks"][0].contains("peak_memory_bytes"));
  DtrainProcess status = env.run({"status", run_id_of(dir)});
  CHECK(status.out().find("PEAK MEM") == std::string::npos);
  CHECK(read_text(dir + "/metrics.prom").find("peak_accelerator_memory") == std::string::npos);
  check_nothing_left(run_id_of(dir));
}
