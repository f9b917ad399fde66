// Where the step time goes (issue 28 item 6), end to end: real runs under `dtrain submit`, then
// `dtrain report` and metrics.prom must name the bottleneck. Unmodified PyTorch scripts (no
// dtrain code in them: the bootstrap measures the DataLoader's wait and the time in collectives)
// and the reference trainer, whose ranks report data_ms and comm_ms themselves.
//
// Every verdict compares parts of the same steps with each other, never a wall-clock bound: a
// DataLoader that sleeps 30 ms an item against a step of microseconds of compute, a rank that
// sleeps 150 ms before its backward pass against peers that have nothing else to do.

#include <doctest/doctest.h>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

std::string spec_for(const std::string& name, int ranks, const std::string& command) {
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(ranks) +
         "\nworker:\n  command: " + command + "\n  backend: gloo\n"
         "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\nstop_grace: 2s\n";
}

/// The report's bottleneck paragraph: its data-part and data-waited-for, and its sentence.
struct Verdict {
  std::string part, waited_for, sentence;
};

std::string attribute(const std::string& html, size_t at, const std::string& name) {
  size_t end = html.find('>', at);
  size_t found = html.find(" " + name + "=\"", at);
  if (found == std::string::npos || found > end) return "";
  found += name.size() + 3;
  return html.substr(found, html.find('"', found) - found);
}

Verdict verdict_of(const std::string& html) {
  size_t at = html.find("<p id=\"bottleneck\"");
  if (at == std::string::npos) return {};
  size_t text = html.find('>', at) + 1;
  return {attribute(html, at, "data-part"), attribute(html, at, "data-waited-for"),
          html.substr(text, html.find("</p>", text) - text)};
}

/// Submits the spec, waits for the run to succeed, makes its report; the run directory.
std::string run_and_report(DtrainEnv& env, const std::string& name, const std::string& spec) {
  DtrainProcess run = env.run({"submit", env.write_spec(name + ".yaml", spec)}, 240'000);
  std::vector<std::string> dirs = env.run_dirs();
  REQUIRE(dirs.size() == 1);
  INFO("dtrain submit said: " << run.err() << "\nrank 0: " << read_text(dirs[0] + "/ranks/0.log"));
  REQUIRE(run.exit_code == 0);
  DtrainProcess report = env.run({"report", dirs[0]}, 60'000);
  INFO(report.err());
  REQUIRE(report.exit_code == 0);
  return dirs[0];
}

/// Writes `script` and runs it unmodified on `ranks` local ranks; the run directory.
std::string run_python_and_report(DtrainEnv& env, const std::string& name, int ranks, const std::string& script) {
  std::string path = env.dir.path + "/" + name + ".py";
  write_text(path, script);
  return run_and_report(env, name, spec_for(name, ranks, "[/usr/bin/python3, '" + path + "']"));
}

constexpr const char* kSlowDataScript = R"PY(
import time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

class SlowStorage(Dataset):
    def __len__(self):
        return 1 << 20
    def __getitem__(self, index):
        time.sleep(0.03)  # a read from slow storage
        return torch.ones(4) * (index % 7), torch.ones(1)

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batches = iter(DataLoader(SlowStorage(), batch_size=2))
for step in range(100):
    x, y = next(batches)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
dist.destroy_process_group()
)PY";

constexpr const char* kSlowPeerScript = R"PY(
import os, time, torch, torch.distributed as dist

dist.init_process_group("gloo")
slow = dist.get_rank() == 3
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.ones(8, 16), torch.ones(8, 1)
for step in range(40):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    if slow:
        time.sleep(0.15)  # rank 3 reaches the gradient all-reduce 150 ms after its peers
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
)PY";

}  // namespace

TEST_CASE("step split: an unmodified script with a slow DataLoader is named data-bound, in report.html and metrics.prom") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string dir = run_python_and_report(env, "slowdata", 2, kSlowDataScript);
  std::string html = read_text(dir + "/report.html");
  Verdict verdict = verdict_of(html);
  INFO("verdict: " << verdict.sentence);
  CHECK(verdict.part == "data");
  CHECK(verdict.sentence.find("Data reading: ranks wait for input") != std::string::npos);
  CHECK(html.find("<a href=\"#step-split\">data</a>") != std::string::npos);  // the outcome's row
  CHECK(html.find("class=\"split-part\" data-part=\"data\"") != std::string::npos);
  std::string prom = read_text(dir + "/metrics.prom");
  CHECK(prom.find("part=\"data\"} 1\n") != std::string::npos);
  CHECK(prom.find("dtrain_step_bottleneck{") != std::string::npos);
  CHECK(read_text(dir + "/ranks/0.log").find("dtrain bootstrap") == std::string::npos);  // nothing went wrong in it
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("step split: an unmodified DDP script with one slow peer of 4 is named communication, waiting for that rank") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string dir = run_python_and_report(env, "slowpeer", 4, kSlowPeerScript);
  std::string html = read_text(dir + "/report.html");
  Verdict verdict = verdict_of(html);
  INFO("verdict: " << verdict.sentence);
  CHECK(verdict.part == "communication");
  CHECK(verdict.waited_for == "3");
  CHECK(verdict.sentence.find("rank 3&#39;s own work takes") != std::string::npos);
  std::string prom = read_text(dir + "/metrics.prom");
  CHECK(prom.find("part=\"communication\"} 1\n") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("step split: dtrain-train with a slow rank of 4 is named communication, waiting for that rank") {
  DtrainEnv env;
  env.environment.emplace_back("DTRAIN_FAULT_SLOW_RANK", "2:100");
  std::string dir = run_and_report(env, "trainer", spec_for("trainer", 4, "[dtrain-train, --steps, \"60\"]"));
  std::string html = read_text(dir + "/report.html");
  Verdict verdict = verdict_of(html);
  INFO("verdict: " << verdict.sentence);
  CHECK(verdict.part == "communication");
  CHECK(verdict.waited_for == "2");
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("step split: a script that reports neither part gets no verdict, and metrics.prom claims none") {
  require_python_module("torch.optim");
  DtrainEnv env;
  std::string dir = run_python_and_report(env, "plain", 1,
                                          "import time, torch\n"
                                          "model = torch.nn.Linear(4, 1)\n"
                                          "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                                          "for step in range(30):\n"
                                          "    optimizer.zero_grad()\n"
                                          "    model(torch.ones(2, 4)).sum().backward()\n"
                                          "    optimizer.step()\n"
                                          "    time.sleep(0.02)\n");
  Verdict verdict = verdict_of(read_text(dir + "/report.html"));
  CHECK(verdict.part.empty());
  CHECK(verdict.sentence.find("cannot be split") != std::string::npos);
  CHECK(read_text(dir + "/metrics.prom").find("dtrain_step_bottleneck{") == std::string::npos);
  check_nothing_left(run_id_of(dir));
}
