// Fuzz target: DeepSpeed-style include/exclude filters ("worker-0@worker-1:0,2").
// Input: three lines: the hosts (a host expression, "gpu[01-04] slots=4"), the include filter,
// the exclude filter (the rest of the input). Hosts are de-duplicated and hosts without a slot
// count get 2, as the loader does with slots_per_host.
// Invariants: a filter never invents a host or a slot: the kept hosts are a non-empty,
// in-order subset of the given ones, each with slots == |only_slots| when only_slots is set,
// only_slots ascending and among the slots the host had; include is idempotent; both filters
// at once are an error.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_set>

#include "fuzz/fuzz_check.h"
#include "fuzz/host_invariants.h"
#include "launcher/base/strings.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

std::vector<int> slots_of(const spec::HostEntry& host) {
  if (!host.only_slots.empty()) return host.only_slots;
  std::vector<int> all;
  for (int i = 0; i < host.slots; ++i) all.push_back(i);
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [hosts_line, rest] = first_line(as_text(data, size));
  auto [include, exclude] = first_line(rest);

  auto parsed = spec::parse_host_expression(hosts_line);
  if (!parsed) return 0;
  std::vector<spec::HostEntry> hosts;
  std::unordered_set<std::string> names;
  for (spec::HostEntry& host : *parsed) {
    if (!names.insert(host.name).second) continue;
    if (host.slots == 0) host.slots = 2;
    hosts.push_back(std::move(host));
  }

  auto kept = spec::apply_include_exclude(hosts, include, exclude);
  bool including = !trim(include).empty(), excluding = !trim(exclude).empty();
  if (including && excluding) check(!kept.ok(), "include and exclude together are an error");
  if (!including && !excluding) check(kept && *kept == hosts, "no filter keeps every host unchanged");
  if (!kept) {
    check(!kept.error().message.empty(), "an error says what is wrong");
    return 0;
  }

  check(!kept->empty(), "a filter that succeeds leaves a host");
  size_t next = 0;  // kept hosts are a subsequence of hosts
  for (const spec::HostEntry& host : *kept) {
    while (next < hosts.size() && hosts[next].name != host.name) ++next;
    check(next < hosts.size(), "a kept host was given, in order", host.name);
    const spec::HostEntry& original = hosts[next++];
    check(host.name == original.name && host.user == original.user && host.port == original.port,
          "a filter changes only a host's slots", host.name);
    check(host.slots >= 1 && host.slots <= original.slots, "a kept host keeps 1..its slots",
          host.name + " slots=" + std::to_string(host.slots));
    if (!host.only_slots.empty()) {
      check(host.slots == static_cast<int>(host.only_slots.size()), "slots == |only_slots|", host.name);
      check(std::adjacent_find(host.only_slots.begin(), host.only_slots.end(),
                               [](int a, int b) { return a >= b; }) == host.only_slots.end(),
            "only_slots ascend without repeats", host.name);
      std::vector<int> had = slots_of(original);
      for (int slot : host.only_slots) {
        check(std::find(had.begin(), had.end(), slot) != had.end(), "a kept slot was one of the host's",
              host.name + ":" + std::to_string(slot));
      }
    }
  }
  if (including) {
    auto again = spec::apply_include_exclude(*kept, include, "");
    check(again && *again == *kept, "include applied twice keeps the same hosts",
          describe(*kept) + (again ? " → " + describe(*again) : " → " + again.error().message));
  }
  return 0;
}
