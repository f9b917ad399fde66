// Fuzz target: what Slurm puts in a job's environment, as `hosts: slurm` reads it. Input: line 1
// is SLURM_JOB_NODELIST, the rest SLURM_TASKS_PER_NODE (also parsed alone, and as squeue's time
// left). Invariants: parsed task counts are 1..2^20 each, at most 65536 of them, and print back
// to the same counts; an allocation has one host per listed node, each with its slots, or an
// error that says what is wrong; a time left is never negative.

#include <cstddef>
#include <cstdint>
#include <map>

#include "fuzz/fuzz_check.h"
#include "launcher/spec/slurm_allocation.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);
  auto [nodelist, tasks] = first_line(text);

  auto counts = spec::parse_tasks_per_node(tasks);
  if (counts) {
    check(!counts->empty() && counts->size() <= 65536, "1 to 65536 task counts");
    std::string printed;
    for (int count : *counts) {
      check(count >= 1 && count <= (1 << 20), "a task count is 1..2^20", std::to_string(count));
      printed += (printed.empty() ? "" : ",") + std::to_string(count);
    }
    auto again = spec::parse_tasks_per_node(printed);
    check(again && *again == *counts, "the counts print back to themselves", std::string(tasks));
  } else {
    check(!counts.error().message.empty(), "an error says what is wrong");
  }

  if (auto left = spec::parse_slurm_time_left_ms(tasks)) check(*left >= 0, "a time left is not negative");

  std::map<std::string, std::string> env{{"SLURM_JOB_ID", "1"},
                                         {"SLURM_JOB_NODELIST", std::string(nodelist)},
                                         {"SLURM_NTASKS", "1"},
                                         {"SLURM_TASKS_PER_NODE", std::string(tasks)}};
  auto lookup = [&env](const std::string& name) -> std::optional<std::string> {
    auto found = env.find(name);
    if (found == env.end()) return std::nullopt;
    return found->second;
  };
  auto allocation = spec::read_slurm_allocation(lookup, 0);
  if (allocation) {
    check(!allocation->hosts.empty(), "an allocation has hosts");
    check(counts && counts->size() == allocation->hosts.size(), "one host per task count");
    for (size_t i = 0; i < allocation->hosts.size(); ++i) {
      check(allocation->hosts[i].slots == (*counts)[i], "each host has its node's task count");
    }
  } else {
    check(!allocation.error().message.empty(), "an error says what is wrong");
  }
  return 0;
}
