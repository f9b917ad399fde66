// `hosts: slurm`: SLURM_TASKS_PER_NODE parsing and the allocation's hosts and slots, with the
// environment injected (the real Slurm runs in tests/integration/cluster_slurm_*_test.cpp).

#include <doctest/doctest.h>
#include <stdlib.h>

#include <map>

#include "launcher/spec/slurm_allocation.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using namespace dtrain::spec;

namespace {

EnvLookup environment(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const std::string& name) -> std::optional<std::string> {
    auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

std::vector<int> tasks(std::string_view text) {
  auto counts = parse_tasks_per_node(text);
  REQUIRE_MESSAGE(counts.ok(), counts.error().message);
  return *counts;
}

std::vector<std::pair<std::string, int>> placed(const SlurmAllocation& allocation) {
  std::vector<std::pair<std::string, int>> out;
  for (const HostEntry& host : allocation.hosts) out.emplace_back(host.name, host.slots);
  return out;
}

}  // namespace

TEST_CASE("SLURM_TASKS_PER_NODE: counts, repeats and their mix") {
  CHECK(tasks("1") == std::vector<int>{1});
  CHECK(tasks("4(x2)") == std::vector<int>{4, 4});
  CHECK(tasks("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(tasks("8,2(x2),16") == std::vector<int>{8, 2, 2, 16});
}

TEST_CASE("SLURM_TASKS_PER_NODE: malformed values are errors that show the expected form") {
  for (const char* bad : {"", "x", "2(x)", "2(3)", "2(x3", "(x3)", "2,,1", "0", "2(x0)", "-1", "1,", "2 (x3)",
                          "99999999", "1(x70000)"}) {
    CAPTURE(bad);
    auto counts = parse_tasks_per_node(bad);
    REQUIRE_FALSE(counts.ok());
    CHECK(counts.error().message.find("2(x3),1") != std::string::npos);
  }
}

TEST_CASE("allocation: hosts from SLURM_JOB_NODELIST with slots from SLURM_TASKS_PER_NODE") {
  auto allocation = read_slurm_allocation(environment({{"SLURM_JOB_ID", "42"},
                                                       {"SLURM_JOB_NODELIST", "gpu[01-03],cpu7"},
                                                       {"SLURM_NTASKS", "8"},
                                                       {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                                                       {"SLURM_GPUS_ON_NODE", "8"}}),
                                          0);
  REQUIRE_MESSAGE(allocation.ok(), allocation.error().message);
  CHECK(allocation->job_id == "42");
  CHECK(allocation->slots_from == "SLURM_TASKS_PER_NODE");
  CHECK(placed(*allocation) == std::vector<std::pair<std::string, int>>{
                                   {"gpu01", 2}, {"gpu02", 2}, {"gpu03", 2}, {"cpu7", 1}});
}

TEST_CASE("allocation: a GPU job that asked for no tasks gets one slot per GPU") {
  auto allocation = read_slurm_allocation(environment({{"SLURM_JOB_ID", "7"},
                                                       {"SLURM_JOB_NODELIST", "node[1-2]"},
                                                       {"SLURM_TASKS_PER_NODE", "1(x2)"},
                                                       {"SLURM_GPUS_ON_NODE", "4"}}),
                                          0);
  REQUIRE_MESSAGE(allocation.ok(), allocation.error().message);
  CHECK(allocation->slots_from == "SLURM_GPUS_ON_NODE");
  CHECK(placed(*allocation) == std::vector<std::pair<std::string, int>>{{"node1", 4}, {"node2", 4}});
}

TEST_CASE("allocation: slots_per_host in the spec wins, and SLURM_NODELIST is the older name") {
  auto allocation = read_slurm_allocation(environment({{"SLURM_JOB_ID", "7"},
                                                       {"SLURM_NODELIST", "n[09-10]"},
                                                       {"SLURM_TASKS_PER_NODE", "1(x2)"}}),
                                          3);
  REQUIRE_MESSAGE(allocation.ok(), allocation.error().message);
  CHECK(placed(*allocation) == std::vector<std::pair<std::string, int>>{{"n09", 3}, {"n10", 3}});
}

TEST_CASE("allocation: outside Slurm, and variables that disagree, are clear errors") {
  auto outside = read_slurm_allocation(environment({}), 0);
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.error().message.find("not inside a Slurm allocation") != std::string::npos);
  CHECK(outside.error().message.find("salloc") != std::string::npos);

  auto mismatch = read_slurm_allocation(environment({{"SLURM_JOB_ID", "1"},
                                                     {"SLURM_JOB_NODELIST", "a[1-3]"},
                                                     {"SLURM_TASKS_PER_NODE", "2(x2)"}}),
                                        0);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().message.find("gives 2 nodes") != std::string::npos);

  auto bad_list = read_slurm_allocation(environment({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "a[3-1]"}}), 0);
  REQUIRE_FALSE(bad_list.ok());
  CHECK(bad_list.error().message.find("SLURM_JOB_NODELIST") != std::string::npos);
}

TEST_CASE("spec: hosts: slurm reads the allocation, makes srun the transport, and fails clearly outside one") {
  const char* yaml = "version: 1\nhosts: slurm\nworker:\n  command: [/bin/true]\n";
  unsetenv("SLURM_JOB_ID");
  LoadResult outside = parse_job_spec(yaml, "job.yaml", "/tmp");
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.message().find("job.yaml:2:8: hosts: hosts: slurm, but this is not inside a Slurm "
                                           "allocation") != std::string::npos);

  setenv("SLURM_JOB_ID", "99", 1);
  setenv("SLURM_JOB_NODELIST", "dt-h[1-3]", 1);
  setenv("SLURM_TASKS_PER_NODE", "2,1(x2)", 1);
  LoadResult inside = parse_job_spec(yaml, "job.yaml", "/tmp");
  REQUIRE_MESSAGE(inside.ok(), inside.message());
  REQUIRE(inside.spec->hosts.size() == 3);
  CHECK(inside.spec->hosts[0].name == "dt-h1");
  CHECK(inside.spec->hosts[0].slots == 2);
  CHECK(inside.spec->hosts[2].slots == 1);
  CHECK(inside.spec->transport == TransportKind::srun);

  // The resolved spec names the hosts and the transport: read again, it is the same job.
  LoadResult again = parse_job_spec(to_yaml(*inside.spec), "spec.yaml", "/tmp");
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->hosts == inside.spec->hosts);
  CHECK(again.spec->transport == TransportKind::srun);

  LoadResult ssh = parse_job_spec("version: 1\nhosts: slurm\ntransport: ssh\nslots_per_host: 4\n"
                                  "worker:\n  command: [/bin/true]\n",
                                  "job.yaml", "/tmp");
  REQUIRE_MESSAGE(ssh.ok(), ssh.message());
  CHECK(ssh.spec->transport == TransportKind::ssh);
  CHECK(ssh.spec->hosts[1].slots == 4);
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  unsetenv("SLURM_TASKS_PER_NODE");
}

TEST_CASE("squeue's time left: every form it prints, and the ones that mean no limit") {
  CHECK(parse_slurm_time_left_ms("0:45") == 45'000);
  CHECK(parse_slurm_time_left_ms("59:59\n") == (59 * 60 + 59) * 1000);
  CHECK(parse_slurm_time_left_ms("1:00:00") == 3'600'000);
  CHECK(parse_slurm_time_left_ms("2-03:04:05") == ((2 * 24 + 3) * 3600 + 4 * 60 + 5) * 1000LL);
  CHECK(parse_slurm_time_left_ms("1-02") == 26 * 3'600'000LL);
  CHECK(parse_slurm_time_left_ms("1-02:30") == (26 * 3600 + 30 * 60) * 1000LL);
  for (const char* none : {"UNLIMITED", "NOT_SET", "INVALID", "", "5", "1:2:3:4", "a:bc", "-1:00"}) {
    CAPTURE(none);
    CHECK_FALSE(parse_slurm_time_left_ms(none).has_value());
  }
}
