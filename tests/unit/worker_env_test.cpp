// The worker environment across hosts: devices from slots (only_slots honoured), MASTER_ADDR
// choices, and the PATH a worker gets on its host. Pure functions; no processes.

#include <doctest/doctest.h>

#include "launcher/agent/worker_process.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/run/worker_env.h"
#include "worker/runtime/cuda_device.h"

using namespace dtrain;

namespace {

spec::JobSpec make_spec(const std::vector<std::string>& hosts, int slots) {
  spec::JobSpec spec;
  spec.name = "test";
  spec.slots_per_host = slots;
  for (const std::string& name : hosts) {
    spec::HostEntry host;
    host.name = name;
    spec.hosts.push_back(host);
  }
  spec.worker.command = {"train"};
  return spec;
}

plan::RankPlan plan_of(const spec::JobSpec& spec) {
  Result<plan::RankPlan> plan = plan::make_plan(spec);
  REQUIRE(plan.ok());
  return *plan;
}

run::EnvMap devices_of(const spec::JobSpec& spec, int rank, bool visible) {
  plan::RankPlan plan = plan_of(spec);
  return run::device_worker_env(spec, plan, plan.ranks.at(static_cast<size_t>(rank)), visible);
}

}  // namespace

TEST_CASE("only_slots [0, 2] gives devices 0 and 2, and CUDA_VISIBLE_DEVICES hides slot 1") {
  spec::JobSpec spec = make_spec({"gpu01"}, 4);
  spec.hosts[0].only_slots = {0, 2};
  spec.hosts[0].slots = 2;
  run::EnvMap rank0 = devices_of(spec, 0, true);
  run::EnvMap rank1 = devices_of(spec, 1, true);
  CHECK(rank0.at("DTRAIN_DEVICE") == "0");
  CHECK(rank1.at("DTRAIN_DEVICE") == "2");
  // The same list for every rank of the host: cuda:LOCAL_RANK is each rank's own GPU.
  CHECK(rank0.at("CUDA_VISIBLE_DEVICES") == "0,2");
  CHECK(rank1.at("CUDA_VISIBLE_DEVICES") == "0,2");
  // What the NCCL communicator then selects inside each process.
  CHECK(worker::cuda_ordinal(rank1.at("DTRAIN_DEVICE"), rank1.at("CUDA_VISIBLE_DEVICES"), 1, 2) == 1);
  CHECK(worker::cuda_ordinal(rank0.at("DTRAIN_DEVICE"), rank0.at("CUDA_VISIBLE_DEVICES"), 0, 2) == 0);
}

TEST_CASE("devices per host: each host lists only the slots its own ranks use") {
  spec::JobSpec spec = make_spec({"gpu01", "gpu02"}, 2);
  spec.hosts[1].only_slots = {1, 3};
  spec.hosts[1].slots = 2;
  CHECK(devices_of(spec, 1, true).at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(devices_of(spec, 2, true).at("DTRAIN_DEVICE") == "1");
  CHECK(devices_of(spec, 3, true).at("DTRAIN_DEVICE") == "3");
  CHECK(devices_of(spec, 3, true).at("CUDA_VISIBLE_DEVICES") == "1,3");
}

TEST_CASE("a CPU-only host with gloo gets DTRAIN_DEVICE but no CUDA_VISIBLE_DEVICES") {
  run::EnvMap env = devices_of(make_spec({"localhost"}, 2), 1, false);
  CHECK(env.at("DTRAIN_DEVICE") == "1");
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("a CUDA_VISIBLE_DEVICES in the spec's worker.env is left as the user set it") {
  spec::JobSpec spec = make_spec({"gpu01"}, 2);
  spec.worker.env["CUDA_VISIBLE_DEVICES"] = "3,1";
  run::EnvMap env = devices_of(spec, 1, true);
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);  // common env (spec.worker.env) carries the user's
  CHECK(env.at("DTRAIN_DEVICE") == "1");
  // Slot 1 is CUDA ordinal 1 in the user's "3,1"; a slot not listed falls back to LOCAL_RANK.
  CHECK(worker::cuda_ordinal(std::string("1"), std::string("3,1"), 1, 2) == 1);
  CHECK(worker::cuda_ordinal(std::string("3"), std::string("3,1"), 1, 2) == 0);
  CHECK(worker::cuda_ordinal(std::string("0"), std::string("3,1"), 1, 2) == 1);
}

TEST_CASE("cuda_ordinal: DTRAIN_DEVICE without CUDA_VISIBLE_DEVICES, nothing set, and more ranks than GPUs") {
  CHECK(worker::cuda_ordinal(std::string("2"), std::nullopt, 1, 4) == 2);
  CHECK(worker::cuda_ordinal(std::nullopt, std::nullopt, 3, 4) == 3);
  CHECK(worker::cuda_ordinal(std::nullopt, std::nullopt, 5, 4) == 1);
  CHECK(worker::cuda_ordinal(std::string("x"), std::nullopt, 1, 4) == 1);
  CHECK(worker::cuda_ordinal(std::string("1"), std::string("GPU-8f3a,GPU-77c1"), 1, 2) == 1);
}

TEST_CASE("MASTER_ADDR: all ranks on the launch node use loopback") {
  spec::JobSpec spec = make_spec({"localhost"}, 2);
  CHECK(run::master_address(spec, plan_of(spec), {"launch01", true, ""}) == "127.0.0.1");
}

TEST_CASE("MASTER_ADDR: rank 0 on a remote host is that host's name as the spec lists it") {
  spec::JobSpec spec = make_spec({"gpu02", "localhost"}, 1);
  CHECK(run::master_address(spec, plan_of(spec), {"launch01", true, "10.0.0.1"}) == "gpu02");
}

TEST_CASE("MASTER_ADDR: rank 0 on localhost with remote hosts is never localhost") {
  spec::JobSpec spec = make_spec({"localhost", "gpu02"}, 1);
  plan::RankPlan plan = plan_of(spec);
  // The launch node's name, when it resolves beyond loopback.
  CHECK(run::master_address(spec, plan, {"launch01", true, "10.0.0.1"}) == "launch01");
  // Else the address the SSH connection to the remote host left from.
  CHECK(run::master_address(spec, plan, {"launch01", false, "10.0.0.1"}) == "10.0.0.1");
  // Else the name anyway: better a name that may resolve there than loopback, which cannot work.
  CHECK(run::master_address(spec, plan, {"launch01", false, ""}) == "launch01");
}

TEST_CASE("MASTER_ADDR: a value in the spec's worker.env wins") {
  spec::JobSpec spec = make_spec({"localhost", "gpu02"}, 1);
  spec.worker.env["MASTER_ADDR"] = "10.9.0.1";
  CHECK(run::master_address(spec, plan_of(spec), {"launch01", true, "10.0.0.1"}) == "10.9.0.1");
}

TEST_CASE("worker PATH: dtrain's directory, then the host's own PATH (or the spec's)") {
  CHECK(agent::worker_search_path("/opt/dtrain/bin", nullptr, "/home/u/conda/bin:/usr/bin") ==
        "/opt/dtrain/bin:/home/u/conda/bin:/usr/bin");
  std::string spec_path = "/custom/bin";
  CHECK(agent::worker_search_path("/opt/dtrain/bin", &spec_path, "/home/u/conda/bin:/usr/bin") ==
        "/opt/dtrain/bin:/custom/bin");
  CHECK(agent::worker_search_path("/opt/dtrain/bin", nullptr, nullptr) == "/opt/dtrain/bin:/usr/local/bin:/usr/bin:/bin");
  CHECK(agent::worker_search_path("", nullptr, "/usr/bin") == "/usr/bin");
}

TEST_CASE("common env no longer carries the launch node's PATH") {
  spec::JobSpec spec = make_spec({"localhost", "gpu02"}, 1);
  run::GenerationContext context;
  context.master_addr = "launch01";
  run::EnvMap env = run::common_worker_env(spec, plan_of(spec), context);
  CHECK(env.count("PATH") == 0);
  CHECK(env.at("MASTER_ADDR") == "launch01");
  spec.worker.env["PATH"] = "/custom/bin";
  CHECK(run::common_worker_env(spec, plan_of(spec), context).at("PATH") == "/custom/bin");
}

TEST_CASE("ROLE_NAME is default unless the spec's worker.env names a role (dtrain run --role)") {
  spec::JobSpec spec = make_spec({"localhost"}, 2);
  run::GenerationContext context;
  CHECK(run::common_worker_env(spec, plan_of(spec), context).at("ROLE_NAME") == "default");
  spec.worker.env["ROLE_NAME"] = "trainer";
  CHECK(run::common_worker_env(spec, plan_of(spec), context).at("ROLE_NAME") == "trainer");
}
