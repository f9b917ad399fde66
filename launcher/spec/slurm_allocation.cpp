#include "launcher/spec/slurm_allocation.h"

#include <cstdlib>

#include "launcher/base/strings.h"
#include "launcher/spec/spec_loader.h"
#include "launcher/spec/spec_reader.h"

namespace dtrain::spec {
namespace {

// A positive count of at most 1 << 20 (the spec's own limit on slots), digits only.
std::optional<int> parse_count(std::string_view text) {
  if (text.empty() || text.size() > 7) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > (1 << 20)) return std::nullopt;
  return value;
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

bool in_slurm_allocation(const EnvLookup& env) {
  std::optional<std::string> job = env("SLURM_JOB_ID");
  return job && !job->empty();
}

Result<std::vector<int>> parse_tasks_per_node(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Error::user("SLURM_TASKS_PER_NODE " + single_quoted(std::string(text.substr(0, 200))) + ": " + why +
                 "; expected counts such as 2(x3),1");
  };
  if (text.empty()) return bad("empty");
  std::vector<int> counts;
  size_t position = 0;
  while (true) {
    size_t comma = text.find(',', position);
    std::string_view item = text.substr(position, comma == std::string_view::npos ? std::string_view::npos
                                                                                 : comma - position);
    int repeat = 1;
    size_t open = item.find('(');
    if (open != std::string_view::npos) {
      if (item.size() < open + 4 || item.substr(open, 2) != "(x" || item.back() != ')') {
        return bad("'" + std::string(item) + "' is not N or N(xM)");
      }
      std::optional<int> times = parse_count(item.substr(open + 2, item.size() - open - 3));
      if (!times) return bad("bad repeat count in '" + std::string(item) + "'");
      repeat = *times;
      item = item.substr(0, open);
    }
    std::optional<int> count = parse_count(item);
    if (!count) return bad("'" + std::string(item) + "' is not a count of tasks");
    // SLURM_JOB_NODELIST caps what we can use; this caps what a corrupt value can make us build.
    if (counts.size() + static_cast<size_t>(repeat) > 65536) return bad("more than 65536 nodes");
    counts.insert(counts.end(), static_cast<size_t>(repeat), *count);
    if (comma == std::string_view::npos) break;
    position = comma + 1;
  }
  return counts;
}

Result<SlurmAllocation> read_slurm_allocation(const EnvLookup& env, int slots_per_host) {
  if (!in_slurm_allocation(env)) {
    return Error::user("hosts: slurm, but this is not inside a Slurm allocation (SLURM_JOB_ID is not set); run dtrain "
                 "in an salloc shell or an sbatch script, or list the hosts (hosts: [gpu01, gpu02])");
  }
  SlurmAllocation allocation;
  allocation.job_id = *env("SLURM_JOB_ID");
  std::optional<std::string> nodelist = env("SLURM_JOB_NODELIST");
  std::string nodelist_name = "SLURM_JOB_NODELIST";
  if (!nodelist || nodelist->empty()) {
    nodelist = env("SLURM_NODELIST");
    nodelist_name = "SLURM_NODELIST";
  }
  if (!nodelist || nodelist->empty()) {
    return Error::user("Slurm job " + allocation.job_id + " gives no node list (SLURM_JOB_NODELIST is not set)");
  }
  Result<std::vector<std::string>> names = expand_hostlist(*nodelist);
  if (!names) return Error::user(nodelist_name + ": " + names.error().message);

  std::vector<int> slots(names->size(), slots_per_host);
  if (slots_per_host > 0) {
    allocation.slots_from = "slots_per_host";
  } else {
    std::optional<std::string> tasks = env("SLURM_TASKS_PER_NODE");
    std::optional<std::string> gpus = env("SLURM_GPUS_ON_NODE");
    bool asked_for_tasks = env("SLURM_NTASKS_PER_NODE").has_value() || env("SLURM_NTASKS").has_value();
    std::optional<int> gpu_count = gpus ? parse_count(*gpus) : std::nullopt;
    if (!asked_for_tasks && gpu_count) {
      slots.assign(names->size(), *gpu_count);
      allocation.slots_from = "SLURM_GPUS_ON_NODE";
    } else if (tasks) {
      Result<std::vector<int>> counts = parse_tasks_per_node(*tasks);
      if (!counts) return counts.error();
      if (counts->size() != names->size()) {
        return Error::user("SLURM_TASKS_PER_NODE '" + *tasks + "' gives " + std::to_string(counts->size()) +
                     " nodes but " + nodelist_name + " '" + *nodelist + "' has " + std::to_string(names->size()) +
                     "; set slots_per_host (dtrain run -n N) to choose the workers per node");
      }
      slots = std::move(*counts);
      allocation.slots_from = "SLURM_TASKS_PER_NODE";
    } else {
      slots.assign(names->size(), 1);
      allocation.slots_from = "one per node (Slurm gave neither SLURM_TASKS_PER_NODE nor SLURM_GPUS_ON_NODE)";
    }
  }
  for (size_t i = 0; i < names->size(); ++i) {
    HostEntry host;
    host.name = (*names)[i];
    host.slots = slots[i];
    allocation.hosts.push_back(std::move(host));
  }
  return allocation;
}

std::optional<int64_t> parse_slurm_time_left_ms(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  int64_t days = 0;
  size_t dash = text.find('-');
  auto number = [](std::string_view digits) -> std::optional<int64_t> {
    if (digits.empty() || digits.size() > 6) return std::nullopt;
    int64_t value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  std::vector<int64_t> fields;  // the clock part, most significant first
  std::string_view clock = text;
  if (dash != std::string_view::npos) {
    std::optional<int64_t> day_count = number(text.substr(0, dash));
    if (!day_count) return std::nullopt;
    days = *day_count;
    clock = text.substr(dash + 1);
  }
  size_t start = 0;
  while (true) {
    size_t colon = clock.find(':', start);
    std::optional<int64_t> field = number(clock.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (!field) return std::nullopt;
    fields.push_back(*field);
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  int64_t hours = 0, minutes = 0, seconds = 0;
  if (dash != std::string_view::npos) {  // D-HH, D-HH:MM, D-HH:MM:SS
    if (fields.size() > 3) return std::nullopt;
    hours = fields[0];
    if (fields.size() > 1) minutes = fields[1];
    if (fields.size() > 2) seconds = fields[2];
  } else if (fields.size() == 2) {  // MM:SS
    minutes = fields[0];
    seconds = fields[1];
  } else if (fields.size() == 3) {  // H:MM:SS
    hours = fields[0];
    minutes = fields[1];
    seconds = fields[2];
  } else {
    return std::nullopt;
  }
  return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000;
}

}  // namespace dtrain::spec
