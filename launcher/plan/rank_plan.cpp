// make_plan: host selection (spares), capacity, data/shrink and batch arithmetic. The rules are
// listed in rank_plan.h; the layout itself (ranks → hosts, groups) is in layout.cpp.

#include "launcher/plan/rank_plan.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>

#include "launcher/base/strings.h"
#include "launcher/plan/layout.h"

namespace dtrain::plan {
namespace {

using detail::Candidate;
using detail::Capacity;

// Far above any real host; keeps rank counts (and the memory for the rank table) sane.
constexpr int kMaxSlotsPerHost = 4096;

std::string str(long long value) { return std::to_string(value); }

// For messages about absurd settings: data=2147483647 must not overflow while saying so.
long long saturating_product(std::initializer_list<long long> factors) {
  long long result = 1;
  for (long long factor : factors)
    if (__builtin_mul_overflow(result, factor, &result)) return LLONG_MAX;
  return result;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The loader validates these too; checking again keeps make_plan safe for specs built in code.
Status check_settings(const spec::JobSpec& spec) {
  const spec::Parallelism& parallelism = spec.parallelism;
  if (parallelism.tensor < 1)
    return Error::user("parallelism.tensor: '" + str(parallelism.tensor) + "' must be 1 or more");
  if (parallelism.pipeline < 1)
    return Error::user("parallelism.pipeline: '" + str(parallelism.pipeline) +
                       "' must be 1 or more");
  if (parallelism.data < 0)
    return Error::user("parallelism.data: '" + str(parallelism.data) +
                       "' must be 'auto' (0) or 1 or more");
  if (spec.batch.global < 0)
    return Error::user("batch.global: '" + str(spec.batch.global) + "' must be 0 (unset) or more");
  if (spec.batch.micro < 0)
    return Error::user("batch.micro: '" + str(spec.batch.micro) + "' must be 0 (unset) or more");
  if (spec.slots_per_host < 1 || spec.slots_per_host > kMaxSlotsPerHost)
    return Error::user("slots_per_host: '" + str(spec.slots_per_host) + "' must be 1 to " +
                       str(kMaxSlotsPerHost));
  if (spec.elastic.min_hosts < 0)
    return Error::user("elastic.min_hosts: '" + str(spec.elastic.min_hosts) +
                       "' must be 0 (no shrinking) or more");
  bool any_host = false;
  for (const auto* list : {&spec.hosts, &spec.spares}) {
    for (const spec::HostEntry& host : *list) {
      if (host.slots > kMaxSlotsPerHost || static_cast<int>(host.only_slots.size()) > kMaxSlotsPerHost)
        return Error::user("hosts: '" + host.name + "' has more than " + str(kMaxSlotsPerHost) +
                           " slots; that is surely a typo in slots=");
      if (host.slots < 0)
        return Error::user("hosts: '" + host.name + "' has slots=" + str(host.slots) +
                           "; write slots=1 or more, or leave it out to use slots_per_host");
      if (!host.spare && list == &spec.hosts) any_host = true;
    }
  }
  if (!any_host) return Error::user("hosts: the spec lists no host to run on; add one (or localhost)");
  return Status::success();
}

struct Selection {
  std::vector<Candidate> hosts;          ///< in spec order, spares in the lost hosts' places
  std::vector<std::string> lost;         ///< hosts in `without` that no spare replaced
  std::vector<std::string> spares_used;
  std::vector<std::string> notes;
  int listed = 0;                        ///< non-spare hosts in the spec
};

// Rule 1 of rank_plan.h.
Result<Selection> select_hosts(const spec::JobSpec& spec, const std::vector<std::string>& without) {
  std::vector<const spec::HostEntry*> hosts, spares;
  for (const spec::HostEntry& host : spec.hosts) (host.spare ? spares : hosts).push_back(&host);
  for (const spec::HostEntry& host : spec.spares) spares.push_back(&host);

  std::vector<std::string> host_names, spare_names;
  for (const auto* host : hosts) host_names.push_back(host->name);
  for (const auto* host : spares) spare_names.push_back(host->name);
  for (const std::string& name : without) {
    if (contains(host_names, name) || contains(spare_names, name)) continue;
    std::vector<std::string> all = host_names;
    all.insert(all.end(), spare_names.begin(), spare_names.end());
    std::string message = "without: '" + name + "' is not a host of this job";
    if (std::string guess = closest_match(name, all); !guess.empty())
      message += " (did you mean '" + guess + "'?)";
    message += "; hosts: " + join(host_names, ", ");
    if (!spare_names.empty()) message += "; spares: " + join(spare_names, ", ");
    return Error::user(message);
  }

  Selection selection;
  selection.listed = static_cast<int>(hosts.size());
  size_t next_spare = 0;
  for (const auto* host : hosts) {
    if (!contains(without, host->name)) {
      selection.hosts.push_back({*host, detail::usable_slots(*host, spec.slots_per_host)});
      continue;
    }
    while (next_spare < spares.size() && contains(without, spares[next_spare]->name)) ++next_spare;
    if (next_spare == spares.size()) {
      selection.lost.push_back(host->name);
      continue;
    }
    const spec::HostEntry& spare = *spares[next_spare++];
    selection.hosts.push_back({spare, detail::usable_slots(spare, spec.slots_per_host)});
    selection.spares_used.push_back(spare.name);
    selection.notes.push_back("replaced " + host->name + " with spare " + spare.name);
  }
  return selection;
}

struct Batch {
  int global = 0, micro = 0, grad_accum = 1;
};

// "a multiple of 32 (96 or 128)": the multiples of `step` nearest to `value`.
std::string multiples_near(long long value, long long step) {
  long long below = value / step * step;
  long long above = below + step;
  std::string text = "a multiple of " + str(step) + " (";
  if (below > 0) text += str(below) + " or ";
  return text + str(above) + ")";
}

// Rule 7 of rank_plan.h, for the full plan.
Result<Batch> batch_for(const spec::BatchSettings& settings, int data) {
  if (settings.global == 0) return Batch{0, settings.micro, 1};
  if (settings.micro == 0 && settings.global % data != 0)
    return Error::user("batch.global: " + str(settings.global) + " does not split evenly over data " +
                       str(data) + " replicas; set batch.global to " +
                       multiples_near(settings.global, data) + ", or set batch.micro");
  int micro = settings.micro > 0 ? settings.micro : settings.global / data;
  long long per_step = static_cast<long long>(micro) * data;
  if (settings.global % per_step != 0)
    return Error::user("batch.global: " + str(settings.global) + " is not a multiple of batch.micro " +
                       str(micro) + " × data " + str(data) + " = " + str(per_step) +
                       "; set batch.global to " + multiples_near(settings.global, per_step) +
                       ", or change batch.micro");
  return Batch{settings.global, micro, static_cast<int>(settings.global / per_step)};
}

std::string replicas(int count) {
  return str(count) + (count == 1 ? " data-parallel replica" : " data-parallel replicas");
}

// The full host set holds too few replicas: say what is needed, what is there, and the fix.
Error too_few_slots(const spec::JobSpec& spec, const std::vector<Candidate>& hosts,
                    const Capacity& capacity, int data, int fits) {
  const int tensor = spec.parallelism.tensor, pipeline = spec.parallelism.pipeline;
  bool partial = false;  // some host has slots that no whole TP group can use
  for (size_t i = 0; i < hosts.size(); ++i) partial = partial || capacity.per_host[i] != hosts[i].usable;
  std::string held = "the hosts hold " + str(capacity.total) +
                     (partial ? " in whole tensor groups" : "") + " (" +
                     detail::describe_capacity(hosts, capacity) + ")";
  if (fits == 0)
    return Error::user("parallelism: one replica of pipeline " + str(pipeline) + " × tensor " +
                       str(tensor) + " needs " + str(1LL * pipeline * tensor) + " slots, but " + held +
                       "; add hosts, raise slots_per_host, or lower parallelism.tensor or "
                       "parallelism.pipeline");
  return Error::user("parallelism: data " + str(data) + " × pipeline " + str(pipeline) +
                     " × tensor " + str(tensor) + " needs " + str(saturating_product({data, pipeline, tensor})) +
                     " slots, but " + held + "; add hosts, raise slots_per_host, or set "
                     "parallelism.data to " + str(fits) + " (or auto)");
}

}  // namespace

Result<RankPlan> make_plan(const spec::JobSpec& spec, const std::vector<std::string>& without_in) {
  if (Status status = check_settings(spec); !status) return status.error();
  std::vector<std::string> without;
  for (const std::string& name : without_in)
    if (!contains(without, name)) without.push_back(name);
  const int tensor = spec.parallelism.tensor, pipeline = spec.parallelism.pipeline;

  // The full host set fixes the data size to keep and the micro batch a shrink keeps.
  Result<Selection> full = select_hosts(spec, {});
  if (!full) return full.error();
  Capacity full_capacity = detail::capacity(full->hosts, tensor);
  int full_fits = full_capacity.groups / pipeline;
  int target = spec.parallelism.data > 0 ? spec.parallelism.data : full_fits;
  if (target == 0 || full_fits < target)
    return too_few_slots(spec, full->hosts, full_capacity, target, full_fits);
  Result<Batch> full_batch = batch_for(spec.batch, target);
  if (!full_batch) return full_batch.error();

  if (without.empty()) {
    RankPlan plan = detail::lay_out(full->hosts, full_capacity, tensor, pipeline, target);
    plan.global_batch = full_batch->global;
    plan.micro_batch = full_batch->micro;
    plan.grad_accum = full_batch->grad_accum;
    return plan;
  }

  Result<Selection> selection = select_hosts(spec, without);
  if (!selection) return selection.error();
  Capacity capacity = detail::capacity(selection->hosts, tensor);
  int fits = std::min(target, capacity.groups / pipeline);
  const std::string lost = join(selection->lost, ", ");
  const std::string where = selection->lost.empty() ? "without " + join(without, ", ")
                                                    : "losing " + lost;
  if (fits == 0)
    return Error::user(where + ": no plan is possible: one replica of pipeline " + str(pipeline) +
                       " × tensor " + str(tensor) + " needs " + str(1LL * pipeline * tensor) +
                       " slots, and the hosts left hold " + str(capacity.total) +
                       (selection->hosts.empty()
                            ? ""
                            : " (" + detail::describe_capacity(selection->hosts, capacity) + ")") +
                       "; bring a host back or add a spare");

  Batch batch = *full_batch;
  int data = fits;
  if (fits < target) {
    if (spec.elastic.min_hosts == 0) {
      int left = selection->listed - static_cast<int>(selection->lost.size());
      return Error::user(where + " leaves " + str(left) + " of " + str(selection->listed) +
                         " hosts (data " + str(target) + " → " + str(fits) +
                         "); set elastic.min_hosts to allow shrinking, or add a spare");
    }
    // Keep the micro batch (it is what fits in memory) and the global batch (the trajectory):
    // data must divide global / micro, so take the largest such count that fits.
    if (batch.global > 0) {
      while (data > 1 && batch.global % (1LL * batch.micro * data) != 0) --data;
      batch.grad_accum = static_cast<int>(batch.global / (1LL * batch.micro * data));
    }
  }

  RankPlan plan = detail::lay_out(selection->hosts, capacity, tensor, pipeline, data);
  plan.global_batch = batch.global;
  plan.micro_batch = batch.micro;
  plan.grad_accum = batch.grad_accum;
  plan.without = without;
  plan.spares_used = selection->spares_used;

  if ((!selection->lost.empty() || data < target) && spec.elastic.min_hosts > 0 &&
      static_cast<int>(plan.hosts.size()) < spec.elastic.min_hosts)
    return Error::user(where + " leaves " + str(plan.hosts.size()) +
                       (plan.hosts.size() == 1 ? " host" : " hosts") +
                       " to run ranks, fewer than elastic.min_hosts=" +
                       str(spec.elastic.min_hosts) +
                       "; no plan is possible until a host returns or a spare is added");

  std::vector<std::string> notes = selection->notes;
  for (const std::string& name : selection->lost) notes.push_back("left out " + name + ": no spare left");
  if (data < target) {
    std::string note = "dropped " + replicas(target - data) + " (data " + str(target) + " → " +
                       str(data) + ")";
    if (batch.global > 0) {
      note += "; grad_accum " + str(full_batch->grad_accum) + " → " + str(batch.grad_accum) +
              " keeps global batch " + str(batch.global);
      if (data < fits)
        note += " (data " + str(fits) + " would fit, but data must divide global / micro = " +
                str(batch.global / batch.micro) + ")";
    }
    notes.push_back(note);
  }
  notes.insert(notes.end(), plan.notes.begin(), plan.notes.end());
  plan.notes = std::move(notes);
  return plan;
}

}  // namespace dtrain::plan
