// Every example spec the project ships must validate: they are what users copy.

#include <doctest/doctest.h>

#include <filesystem>

#include "launcher/spec/spec_loader.h"

namespace fs = std::filesystem;

TEST_CASE("every configs/*.yaml and configs/examples/*.yaml validates") {
  int checked = 0;
  for (const char* folder : {"/configs", "/configs/examples"}) {
    fs::path dir = fs::path(DTRAIN_SOURCE_DIR).concat(folder);
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      std::string name = entry.path().filename().string();
      // Drill specs (drill*.yaml) describe drills, not jobs: dtrain drill --spec reads them.
      if (entry.path().extension() != ".yaml" || name.find("invalid") != std::string::npos ||
          name.rfind("drill", 0) == 0) {
        continue;
      }
      dtrain::spec::LoadResult result = dtrain::spec::load_job_spec(entry.path().string());
      CHECK_MESSAGE(result.ok(), entry.path().string() << ":\n" << result.message());
      ++checked;
    }
  }
  CHECK(checked >= 4);
}

TEST_CASE("the examples resolve to the hosts their comments promise") {
  auto load = [](const char* name) {
    auto result = dtrain::spec::load_job_spec(std::string(DTRAIN_SOURCE_DIR) + "/configs/examples/" + name);
    REQUIRE_MESSAGE(result.ok(), result.message());
    return *result.spec;
  };
  dtrain::spec::JobSpec multi = load("multi-host.yaml");
  CHECK(multi.hosts.size() == 4);
  CHECK(multi.hosts[3].name == "gpu04");
  CHECK(multi.spares.size() == 2);
  CHECK(multi.worker.env.at("OMP_NUM_THREADS") == "4");
  dtrain::spec::JobSpec from_hostfile = load("hostfile-job.yaml");
  REQUIRE(from_hostfile.hosts.size() == 3);
  CHECK(from_hostfile.hosts[2].only_slots == std::vector<int>{0, 2});
  dtrain::spec::JobSpec tp = load("tensor-pipeline.yaml");
  CHECK(tp.hosts.size() == 2);
  CHECK(tp.hosts[1].port == 2222);
  CHECK(load("local-ddp.yaml").hosts[0].name == "localhost");
}
