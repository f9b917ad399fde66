// The words of a plan change at any size: a line a person reads, however many hosts it names.

#include <doctest/doctest.h>

#include <string>

#include "launcher/base/plan_change.h"

namespace {

dtrain::PlanShape hosts_of_one_rank(int count) {
  dtrain::PlanShape shape;
  for (int i = 0; i < count; ++i) {
    dtrain::PlanShape::Host host;
    host.name = "h" + std::to_string(i + 1);
    host.ranks.push_back({i, 0, 0, i});
    shape.hosts.push_back(host);
  }
  shape.world_size = shape.data = count;
  return shape;
}

/// `before` without its first `lost` hosts, as the planner leaves them out.
dtrain::PlanShape without_first(const dtrain::PlanShape& before, int lost) {
  dtrain::PlanShape after = hosts_of_one_rank(static_cast<int>(before.hosts.size()) - lost);
  for (auto& host : after.hosts) host.name = "h" + std::to_string(std::stoi(host.name.substr(1)) + lost);
  for (int i = 0; i < lost; ++i) after.without.push_back(before.hosts[i].name);
  return after;
}

}  // namespace

TEST_CASE("a few excluded hosts are all named") {
  dtrain::PlanShape before = hosts_of_one_rank(6);
  CHECK(dtrain::plan_change_line(before, without_first(before, 2)) ==
        "shrunk from 6 to 4 ranks; hosts h1, h2 excluded; data 6 → 4");
  CHECK(dtrain::plan_change_line(before, without_first(before, 1)) == "shrunk from 6 to 5 ranks; host h1 excluded; data 6 → 5");
}

TEST_CASE("past nine excluded hosts the line names eight and counts the rest") {
  dtrain::PlanShape before = hosts_of_one_rank(30);
  CHECK(dtrain::plan_change_line(before, without_first(before, 9)) ==
        "shrunk from 30 to 21 ranks; hosts h1, h2, h3, h4, h5, h6, h7, h8, h9 excluded; data 30 → 21");
  CHECK(dtrain::plan_change_line(before, without_first(before, 20)) ==
        "shrunk from 30 to 10 ranks; hosts h1, h2, h3, h4, h5, h6, h7, h8 and 12 more excluded; data 30 → 10");
}

TEST_CASE("16,384 hosts: a plan change is described without comparing every host with every other") {
  // Not a timing assertion: a quadratic diff (2.7e8 string comparisons here) would run for
  // seconds and the suite's per-test timeout would catch a return of it.
  dtrain::PlanShape before = hosts_of_one_rank(16384);
  dtrain::PlanShape after = without_first(before, 1000);
  std::string line = dtrain::plan_change_line(before, after);
  CHECK(line.find("and 992 more excluded") != std::string::npos);
}
