// `dtrain hosts SPEC` with the spec's health settings (issue 29): each host's own dtrain checks
// it as an agent would before the first generation (`dtrain agent --health-probe`), and a failed
// check keeps the preflight from passing, with the check's message. localhost only: no sshd.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/dtrain_runner.h"

using dtrain::testing::DtrainEnv;
using dtrain::testing::DtrainProcess;

namespace {

std::string spec_text(const std::string& checkpoint_dir, const std::string& health) {
  return "version: 1\nname: preflight\nworker:\n  command: [\"true\"]\n  backend: gloo\nconsistency: off\n"
         "checkpoint:\n  dir: " + checkpoint_dir + "\n" + health;
}

void put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  dtrain::testing::write_text(path, text);
}

}  // namespace

TEST_CASE("dtrain hosts: a site health command that exits 1 fails the host with its output, every check is listed") {
  DtrainEnv env;
  std::string sysfs = env.dir.path + "/sysfs";
  put(sysfs + "/sys/class/net/lo/operstate", "unknown\n");
  env.environment.push_back({"DTRAIN_SYSFS_ROOT", sysfs});
  env.environment.push_back({"DTRAIN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"});  // this host's GPUs aside
  std::string spec = env.write_spec(
      "job.yaml", spec_text(env.dir.path + "/ckpt", "health:\n  command: \"echo node is drained; exit 1\"\n  min_free: 0\n"));
  DtrainProcess table = env.run({"hosts", spec});
  INFO("stdout: " << table.out() << "\nstderr: " << table.err());
  CHECK(table.exit_code == 3);
  CHECK(table.out().find("HEALTH") != std::string::npos);
  CHECK(table.out().find("health checks (as an agent makes them") != std::string::npos);
  CHECK(table.out().find("checkpoint dir") != std::string::npos);
  CHECK(table.err().find("localhost: site command: unhealthy (exit 1): node is drained (a run keeps this host out)") !=
        std::string::npos);
  CHECK(std::filesystem::is_directory(env.dir.path + "/ckpt"));  // created, as a run's check would

  DtrainProcess json = env.run({"hosts", spec, "--json"});
  CHECK(json.exit_code == 3);
  nlohmann::json document = nlohmann::json::parse(json.out(), nullptr, false);
  REQUIRE(document.is_object());
  const nlohmann::json& host = document["hosts"][0];
  CHECK(host["health"] == "FAIL");
  REQUIRE(host["health_report"].is_object());
  bool site_failed = false;
  for (const nlohmann::json& check : host["health_report"]["checks"]) {
    if (check["name"] == "site command") site_failed = check["verdict"] == "fail";
  }
  CHECK(site_failed);
}

TEST_CASE("dtrain hosts: an InfiniBand port down (a fake sysfs) fails with its fix, a healthy host passes") {
  DtrainEnv env;
  std::string sysfs = env.dir.path + "/sysfs";
  put(sysfs + "/sys/class/net/lo/operstate", "unknown\n");
  put(sysfs + "/sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
  env.environment.push_back({"DTRAIN_SYSFS_ROOT", sysfs});
  env.environment.push_back({"DTRAIN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"});  // this host's GPUs aside
  std::string spec = env.write_spec("job.yaml", spec_text(env.dir.path + "/ckpt", "health:\n  min_free: 0\n"));
  DtrainProcess down = env.run({"hosts", spec});
  INFO("stdout: " << down.out() << "\nstderr: " << down.err());
  CHECK(down.exit_code == 3);
  CHECK(down.err().find("localhost: infiniband mlx5_0/1: port mlx5_0/1 is 1: DOWN, not 4: ACTIVE") != std::string::npos);

  put(sysfs + "/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  DtrainProcess up = env.run({"hosts", spec, "--json"});
  INFO("stdout: " << up.out() << "\nstderr: " << up.err());
  CHECK(up.exit_code == 0);
  nlohmann::json document = nlohmann::json::parse(up.out(), nullptr, false);
  REQUIRE(document.is_object());
  CHECK(document["hosts"][0]["health"] == "ok");

  // health.enabled: false: not checked.
  std::string off = env.write_spec("off.yaml", spec_text(env.dir.path + "/ckpt", "health:\n  enabled: false\n"));
  DtrainProcess unchecked = env.run({"hosts", off, "--json"});
  nlohmann::json off_document = nlohmann::json::parse(unchecked.out(), nullptr, false);
  REQUIRE(off_document.is_object());
  CHECK(off_document["hosts"][0]["health"] == "-");
  CHECK(off_document["hosts"][0]["health_report"].is_null());
}
