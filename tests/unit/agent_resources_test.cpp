// The agent's resource sampler (launcher/agent/resource_sampler.h): /proc numbers of the host
// and of a real worker process tree, GPUs through a fake NVML (tests/fakes/fake_nvml.cpp) and,
// where NVML cannot be loaded, through a fake nvidia-smi (tests/fakes/nvidia-smi).

#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "launcher/agent/resource_sampler.h"
#include "launcher/proto/agent_messages.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::HostSampler;
using dtrain::agent::WatchedWorker;
using dtrain::proto::HostResources;

namespace {

// PATH with the fake nvidia-smi first, for the sampler's lookup; restored at scope end.
struct FakeNvidiaSmiOnPath {
  std::string saved = getenv("PATH") ? getenv("PATH") : "";
  FakeNvidiaSmiOnPath() { setenv("PATH", (std::string(DTRAIN_SOURCE_DIR) + "/tests/fakes:" + saved).c_str(), 1); }
  ~FakeNvidiaSmiOnPath() { setenv("PATH", saved.c_str(), 1); }
};

// A process that burns CPU with a child that does too: a worker's tree.
struct BusyTree {
  pid_t pid = ::fork();
  BusyTree() {
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setpgid(0, 0);
      ::fork();  // both the worker and its child spin
      volatile unsigned long spins = 0;
      for (;;) spins = spins + 1;
    }
    ::setpgid(pid, pid);
  }
  ~BusyTree() {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

}  // namespace

TEST_CASE("a fake NVML's readings arrive as numbers per GPU, and an Xid once") {
  dtrain::testing::TempDir dir;
  std::string values = dir.write("nvml", "gpus=2\nutilization=73\nmemory_used_mb=2048\nmemory_total_mb=81920\n"
                                         "power_mw=250500\ntemperature=66\necc_corrected=4\necc_uncorrected=1\n");
  setenv("DTRAIN_FAKE_NVML_VALUES", values.c_str(), 1);
  HostSampler sampler({DTRAIN_FAKE_NVML, 2000});
  HostResources first = sampler.sample({}, 1000);
  CHECK(first.gpu_source == "nvml");
  CHECK_FALSE(first.gpu_error);
  REQUIRE(first.gpus.size() == 2);
  CHECK(first.gpus[1].index == 1);
  CHECK(first.gpus[0].utilization_percent == doctest::Approx(73));
  CHECK(first.gpus[0].memory_used_mb == 2048);
  CHECK(first.gpus[0].memory_total_mb == 81920);
  CHECK(first.gpus[0].power_w == doctest::Approx(250.5));
  CHECK(first.gpus[0].temperature_c == 66);
  CHECK(first.gpus[0].ecc_corrected == 4);
  CHECK(first.gpus[0].ecc_uncorrected == 1);
  CHECK(first.xids.empty());

  dir.write("nvml", "gpus=2\nutilization=73\nno_ecc=1\nxid=1:79\n");
  HostResources second = sampler.sample({}, 2000);
  REQUIRE(second.xids.size() == 1);
  CHECK(second.xids[0].gpu == 1);
  CHECK(second.xids[0].xid == 79);
  CHECK(second.xids[0].agent_time_ms == 2000);
  CHECK_FALSE(second.gpus[0].ecc_uncorrected);  // not supported: absent, not 0
  CHECK(sampler.sample({}, 3000).xids.empty());  // delivered once
  unsetenv("DTRAIN_FAKE_NVML_VALUES");
}

TEST_CASE("without NVML the sampler reads nvidia-smi --query-gpu, and [N/A] stays absent") {
  FakeNvidiaSmiOnPath fake;
  HostSampler sampler({"/nonexistent/libnvidia-ml.so.1", 5000});
  HostResources resources = sampler.sample({}, 1);
  CHECK(resources.gpu_source == "nvidia-smi");
  CHECK_FALSE(resources.gpu_error);
  REQUIRE(resources.gpus.size() == 2);
  CHECK(resources.gpus[0].utilization_percent == doctest::Approx(88));
  CHECK(resources.gpus[0].memory_used_mb == 4096);
  CHECK(resources.gpus[0].power_w == doctest::Approx(301.25));
  CHECK(resources.gpus[0].ecc_corrected == 3);
  CHECK(resources.gpus[1].temperature_c == 45);
  CHECK_FALSE(resources.gpus[1].power_w);
  CHECK_FALSE(resources.gpus[1].ecc_uncorrected);
}

TEST_CASE("a failing nvidia-smi gives no GPUs and says why, naming NVML's reason too") {
  FakeNvidiaSmiOnPath fake;
  setenv("DTRAIN_FAKE_NVIDIA_SMI_EXIT", "9", 1);
  HostSampler sampler({"/nonexistent/libnvidia-ml.so.1", 5000});
  HostResources resources = sampler.sample({}, 1);
  unsetenv("DTRAIN_FAKE_NVIDIA_SMI_EXIT");
  CHECK(resources.gpus.empty());
  REQUIRE(resources.gpu_error);
  CHECK(resources.gpu_error->find("exited with code 9") != std::string::npos);
  CHECK(resources.gpu_error->find("couldn't communicate with the NVIDIA driver") != std::string::npos);
  CHECK(resources.gpu_error->find("/nonexistent/libnvidia-ml.so.1: cannot load") != std::string::npos);
}

TEST_CASE("no NVML and no nvidia-smi: a CPU host, no GPU readings and no error") {
  std::string saved = getenv("PATH") ? getenv("PATH") : "";
  setenv("PATH", "/nonexistent", 1);
  HostSampler sampler({"/nonexistent/libnvidia-ml.so.1", 5000});
  HostResources resources = sampler.sample({}, 1);
  setenv("PATH", saved.c_str(), 1);
  CHECK(resources.gpu_source.empty());
  CHECK(resources.gpus.empty());
  CHECK_FALSE(resources.gpu_error);
}

TEST_CASE("host and worker /proc numbers are sane: a worker tree that burns CPU shows it, an idle one would not") {
  HostSampler sampler({"/nonexistent/libnvidia-ml.so.1", 5000});
  BusyTree busy;
  std::vector<WatchedWorker> workers = {{0, 3, busy.pid}};
  sampler.sample(workers, 1);
  ::usleep(1'000'000);
  HostResources resources = sampler.sample(workers, 2);
  REQUIRE(resources.cpu_percent);
  CHECK(*resources.cpu_percent > 0);
  CHECK(*resources.cpu_percent <= 100);
  REQUIRE(resources.memory_total_mb);
  REQUIRE(resources.memory_used_mb);
  CHECK(*resources.memory_used_mb > 0);
  CHECK(*resources.memory_used_mb < *resources.memory_total_mb);
  REQUIRE(resources.workers.size() == 1);
  const dtrain::proto::WorkerResources& worker = resources.workers[0];
  CHECK(worker.rank == 3);
  CHECK(worker.pid == busy.pid);
  CHECK(worker.processes == 2);
  CHECK(worker.rss_mb >= 0);
  MESSAGE("busy tree: " << worker.cpu_percent << " % of a core; host " << *resources.cpu_percent << " %");
  // A whole core when the machine is idle; under a parallel ctest on 2 cores it gets less, but an
  // idle tree reads ~0.
  CHECK(worker.cpu_percent > 20);
}

TEST_CASE("a worker that is gone is left out, not reported at 0") {
  HostSampler sampler({"/nonexistent/libnvidia-ml.so.1", 5000});
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  CHECK(sampler.sample({{0, 0, pid}}, 1).workers.empty());
}

TEST_CASE("nvidia-smi's query output: short and non-numeric lines are skipped") {
  auto gpus = dtrain::agent::parse_nvidia_smi_query(
      "0, 5, 10, 20, 30.5, 40, 0, 0\nNo devices were found\n1, [N/A], 1, 2\n[N/A], 1, 2, 3, 4, 5, 6, 7\n");
  REQUIRE(gpus.size() == 1);
  CHECK(gpus[0].power_w == doctest::Approx(30.5));
}

TEST_CASE("beat.resources travels as JSON and parses back to the same numbers") {
  HostResources resources;
  resources.agent_time_ms = 5;
  resources.cpu_percent = 12.5;
  resources.memory_used_mb = 100;
  resources.memory_total_mb = 200;
  resources.workers.push_back({1, 2, 300, 95.5, 40, 3});
  dtrain::proto::GpuResources gpu;
  gpu.index = 0;
  gpu.utilization_percent = 50;
  gpu.ecc_uncorrected = 2;
  resources.gpus.push_back(gpu);
  resources.gpu_source = "nvml";
  resources.xids.push_back({0, 48, 5});
  nlohmann::json beat = {{"type", "beat"}, {"resources", dtrain::proto::to_json(resources)}};
  auto parsed = dtrain::proto::parse_agent_message(beat);
  REQUIRE(parsed.ok());
  const auto& back = std::get<dtrain::proto::AgentBeat>(*parsed).resources;
  REQUIRE(back);
  CHECK(back->cpu_percent == doctest::Approx(12.5));
  REQUIRE(back->workers.size() == 1);
  CHECK(back->workers[0].rank == 2);
  CHECK(back->workers[0].processes == 3);
  REQUIRE(back->gpus.size() == 1);
  CHECK(back->gpus[0].ecc_uncorrected == 2);
  CHECK_FALSE(back->gpus[0].power_w);
  REQUIRE(back->xids.size() == 1);
  CHECK(back->xids[0].xid == 48);

  beat["resources"]["gpus"][0]["index"] = "zero";
  auto bad = dtrain::proto::parse_agent_message(beat);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.rfind("beat.resources.gpus[].index: expected an integer", 0) == 0);
  beat["resources"] = 3;
  CHECK(dtrain::proto::parse_agent_message(beat).error().message.rfind("beat.resources:", 0) == 0);
}
