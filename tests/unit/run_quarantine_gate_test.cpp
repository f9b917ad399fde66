// The quarantine gate of submit, run, resume and plan (launcher/run/quarantine_gate.h) over a
// real registry file: active quarantines of the spec's hosts and spares are left out (a spare in
// a host's place), others and expired or released ones are not; a plan that cannot do without
// them names them and the fix; text from the registry is made printable; no registry is no
// quarantine, an unreadable one a warning with every host planned.

#include <doctest/doctest.h>

#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_quarantine.h"
#include "launcher/run/quarantine_gate.h"
#include "launcher/spec/spec_loader.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using dtrain::testing::TempDir;

namespace {

constexpr int64_t kNow = 1'800'000'000'000;

spec::JobSpec job(const std::string& hosts_yaml) {
  spec::LoadResult loaded = spec::parse_job_spec("version: 1\nname: q\n" + hosts_yaml +
                                                     "slots_per_host: 1\nworker: {command: [\"true\"]}\n",
                                                 "job.yaml", "/specs", {});
  INFO(loaded.message());
  REQUIRE(loaded.ok());
  return *loaded.spec;
}

void quarantine(const std::string& file, const std::string& host, const std::string& reason, int64_t until_ms) {
  Result<registry::RegistryDb> db = registry::RegistryDb::open(file, true);
  REQUIRE(db.ok());
  registry::QuarantineRow row;
  row.host = host;
  row.reason = reason;
  row.since_ms = kNow - 1000;
  row.until_ms = until_ms;
  row.source = registry::kManualQuarantine;
  REQUIRE(registry::insert_quarantine(*db, row));
}

}  // namespace

TEST_CASE("the gate leaves out the spec's quarantined hosts and spares, and only the active ones") {
  TempDir home;
  std::string file = home.path + "/registry.db";
  spec::JobSpec spec = job("hosts: [h1, h2, h3]\nspares: [h4, h5]\n");
  quarantine(file, "h2", "NIC flaps", kNow + 3600'000);
  quarantine(file, "h4", "Xid 79", kNow + 3600'000);
  quarantine(file, "h3", "expired", kNow - 1);           // probation: planned again
  quarantine(file, "elsewhere", "not in the spec", kNow + 3600'000);
  {
    Result<registry::RegistryDb> db = registry::RegistryDb::open(file, false);
    REQUIRE(db.ok());
    quarantine(file, "h1", "released later", kNow + 3600'000);
    REQUIRE(*registry::release_quarantine(*db, "h1", kNow - 10, "alice", "fixed") == 1);
  }
  run::QuarantineGate gate = run::read_quarantine_gate(spec, file, kNow);
  CHECK_FALSE(gate.warning);
  CHECK(gate.hosts() == std::vector<std::string>{"h2", "h4"});
  events::PlanQuarantined event = gate.event();
  REQUIRE(event.hosts.size() == 2);
  CHECK(event.hosts[0].host == "h2");
  CHECK(event.hosts[0].reason == "NIC flaps");
  CHECK(event.hosts[0].until == registry::quarantine_time_text(kNow + 3600'000));

  // h2's place goes to the spare h5 (h4 is quarantined too).
  Result<plan::RankPlan> plan = run::plan_without_quarantined(spec, gate);
  REQUIRE(plan.ok());
  std::vector<std::string> planned;
  for (const plan::PlanHost& host : plan->hosts) planned.push_back(host.entry.name);
  CHECK(planned == std::vector<std::string>{"h1", "h5", "h3"});
}

TEST_CASE("a plan impossible without the quarantined hosts names them, the reason and the fix") {
  TempDir home;
  std::string file = home.path + "/registry.db";
  spec::JobSpec spec = job("hosts: [h1, h2]\n");
  quarantine(file, "h2", "ECC \x1b[31mred\x1b[0m", kNow + 3600'000);
  run::QuarantineGate gate = run::read_quarantine_gate(spec, file, kNow);
  Result<plan::RankPlan> plan = run::plan_without_quarantined(spec, gate);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().kind == ErrorKind::user);
  const std::string& message = plan.error().message;
  CHECK(message.find("quarantined in the registry: h2 (ECC ") != std::string::npos);
  CHECK(message.find("`dtrain hosts release h2`") != std::string::npos);
  // The escape sequence from the registry does not reach the terminal.
  CHECK(message.find('\x1b') == std::string::npos);
  REQUIRE(gate.lines().size() == 1);
  CHECK(gate.lines()[0].find('\x1b') == std::string::npos);
}

TEST_CASE("no registry is no quarantine, an unreadable one is a warning and every host is planned") {
  TempDir home;
  spec::JobSpec spec = job("hosts: [h1, h2]\n");
  run::QuarantineGate none = run::read_quarantine_gate(spec, home.path + "/registry.db", kNow);
  CHECK_FALSE(none.warning);
  CHECK(none.left_out.empty());

  std::string damaged = home.write("registry.db", std::string(4096, 'x'));
  run::QuarantineGate unreadable = run::read_quarantine_gate(spec, damaged, kNow);
  REQUIRE(unreadable.warning);
  CHECK(unreadable.warning->find("quarantined hosts not checked") != std::string::npos);
  CHECK(unreadable.warning->find(damaged) != std::string::npos);
  CHECK(unreadable.left_out.empty());
  Result<plan::RankPlan> plan = run::plan_without_quarantined(spec, unreadable);
  REQUIRE(plan.ok());
  CHECK(plan->hosts.size() == 2);
}
