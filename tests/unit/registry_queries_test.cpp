// The registry's read side over rows inserted through RegistryDb with known times: the quota
// check (a run across the month boundary counts only this month's part, a run still running up
// to now), history, the audit log, host reliability and the capacity hint, each with hours
// computed by hand below.

#include <doctest/doctest.h>

#include <map>

#include "launcher/base/clock.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_queries.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::registry;
using dtrain::testing::TempDir;

namespace {

int64_t at(const std::string& utc) {
  std::optional<int64_t> ms = parse_timestamp_utc(utc + ".000Z");
  REQUIRE_MESSAGE(ms.has_value(), utc);
  return *ms;
}

RunRow run(const std::string& id, const std::string& tenant, const std::string& user, const std::string& submitted,
           const std::string& state) {
  RunRow row;
  row.id = id;
  row.tenant = tenant;
  row.user = user;
  row.name = id + "-job";
  row.submitted_ms = at(submitted);
  row.state = state;
  return row;
}

AllocationRow held(const std::string& run_id, int generation, const std::string& host, int units, const std::string& from,
                   const std::optional<std::string>& to, const std::string& resource = "gpu") {
  AllocationRow row;
  row.run_id = run_id;
  row.generation = generation;
  row.host = host;
  row.units = units;
  row.resource = resource;
  row.start_ms = at(from);
  if (to) row.end_ms = at(*to);
  return row;
}

/// Now, for every query below: 2026-12-03 12:00 UTC.
const char* const kNow = "2026-12-03T12:00:00";

/// Four runs, hand-computed:
///  cross (vision, alice): gpu01, 8 GPUs, 2026-11-30 22:00 → 12-01 04:00: 48 GPU-h, of them
///    2 h × 8 = 16 in November and 4 h × 8 = 32 in December.
///  shrink (vision, bob): generation 0 on gpu02 and gpu03 (4 GPUs each) from 12-02 00:00;
///    gpu03 lost at 02:00 (2 h × 4 = 8); gpu02's generation 0 ends at the re-plan, 02:30
///    (2.5 h × 4 = 10); generation 1 on gpu02 alone 02:30 → 06:30 (4 h × 4 = 16). 34 GPU-h.
///    Failures: gpu03 lost (root cause), rank 0 on gpu02 exited (cascade). gpu03 was excluded
///    at 02:10.
///  running (nlp, carol): gpu04, 2 GPUs since 12-03 00:00, still held: 12 h × 2 = 24 GPU-h.
///  cpu (nlp, carol): cpu01 without GPUs, 4 slots, 12-01 00:00 → 10:00: 40 slot-h.
struct Fixture {
  TempDir home;
  RegistryDb db = open();
  int64_t now = at(kNow);

  RegistryDb open() {
    Result<RegistryDb> opened = RegistryDb::open(home.path + "/registry.db", true);
    REQUIRE(opened.ok());
    return std::move(*opened);
  }

  Fixture() {
    REQUIRE(db.begin());
    RunRow cross = run("cross", "vision", "alice", "2026-11-30T21:59:00", "succeeded");
    cross.started_ms = at("2026-11-30T22:00:00");
    cross.ended_ms = at("2026-12-01T04:00:00");
    cross.exit_code = 0;
    REQUIRE(db.insert_run(cross));
    REQUIRE(db.insert_allocation(held("cross", 0, "gpu01", 8, "2026-11-30T22:00:00", "2026-12-01T04:00:00")));

    RunRow shrink = run("shrink", "vision", "bob", "2026-12-01T23:59:00", "failed");
    shrink.started_ms = at("2026-12-02T00:00:00");
    shrink.ended_ms = at("2026-12-02T06:30:00");
    shrink.exit_code = 1;
    shrink.exit_reason = "rank 0 diverged";
    REQUIRE(db.insert_run(shrink));
    REQUIRE(db.insert_allocation(held("shrink", 0, "gpu02", 4, "2026-12-02T00:00:00", "2026-12-02T02:30:00")));
    REQUIRE(db.insert_allocation(held("shrink", 0, "gpu03", 4, "2026-12-02T00:00:00", "2026-12-02T02:00:00")));
    REQUIRE(db.insert_allocation(held("shrink", 1, "gpu02", 4, "2026-12-02T02:30:00", "2026-12-02T06:30:00")));
    REQUIRE(db.insert_failure({"shrink", 0, "gpu03", std::nullopt, "host.lost", true, at("2026-12-02T02:00:00"), 1800000}));
    REQUIRE(db.insert_failure({"shrink", 0, "gpu02", 0, "worker.exited", false, at("2026-12-02T02:00:01"), 1799000}));
    REQUIRE(db.insert_host_event({"shrink", "gpu03", "lost", "agent connection closed", at("2026-12-02T02:00:00")}));
    REQUIRE(db.insert_host_event({"shrink", "gpu03", "excluded", "lost twice within 1h", at("2026-12-02T02:10:00")}));

    RunRow running = run("running", "nlp", "carol", "2026-12-02T23:59:00", "running");
    running.started_ms = at("2026-12-03T00:00:00");
    REQUIRE(db.insert_run(running));
    REQUIRE(db.insert_allocation(held("running", 0, "gpu04", 2, "2026-12-03T00:00:00", std::nullopt)));

    RunRow cpu = run("cpu", "nlp", "carol", "2026-11-30T23:50:00", "succeeded");
    cpu.started_ms = at("2026-12-01T00:00:00");
    cpu.ended_ms = at("2026-12-01T10:00:00");
    REQUIRE(db.insert_run(cpu));
    REQUIRE(db.insert_allocation(held("cpu", 0, "cpu01", 4, "2026-12-01T00:00:00", "2026-12-01T10:00:00", "slot")));
    REQUIRE(db.commit());
  }
};

}  // namespace

TEST_CASE("quota: this month's part of a run across the boundary, a running run up to now, near and over") {
  Fixture fixture;
  // vision in December: 32 (cross's December part) + 34 (shrink) = 66 GPU-h; November's 16 not.
  Result<QuotaVerdict> near = check_quota(fixture.db, QuotaBudget{80.0, std::nullopt, 0.8}, "vision", fixture.now);
  REQUIRE(near.ok());
  CHECK(near->month == "2026-12");
  CHECK(near->gpu_hours_used == doctest::Approx(66.0));
  CHECK(near->slot_hours_used == 0);
  CHECK(near->kind == QuotaKind::near);  // 66 ≥ 0.8 × 80 = 64, below 80
  CHECK(near->message == "tenant vision has used 66.0 of 80 GPU-hours (82 %) of its budget for 2026-12 (UTC)");

  CHECK(check_quota(fixture.db, QuotaBudget{100.0, std::nullopt, 0.8}, "vision", fixture.now)->kind == QuotaKind::ok);
  CHECK(check_quota(fixture.db, QuotaBudget{66.0, std::nullopt, 0.8}, "vision", fixture.now)->kind == QuotaKind::over);
  Result<QuotaVerdict> over = check_quota(fixture.db, QuotaBudget{50.0, std::nullopt, 0.8}, "vision", fixture.now);
  CHECK(over->kind == QuotaKind::over);
  CHECK(over->message.find("66.0 of 50 GPU-hours (132 %)") != std::string::npos);

  // At 2026-11-30 23:00 the same run had held 1 h × 8 = 8 GPU-h of November.
  Result<QuotaVerdict> november = check_quota(fixture.db, QuotaBudget{10.0, std::nullopt, 0.8}, "vision",
                                              at("2026-11-30T23:00:00"));
  CHECK(november->month == "2026-11");
  CHECK(november->gpu_hours_used == doctest::Approx(8.0));
  CHECK(november->kind == QuotaKind::near);

  // nlp: 24 GPU-h of the running run (to now) and 40 slot-h; the slot budget is the near one.
  Result<QuotaVerdict> nlp = check_quota(fixture.db, QuotaBudget{1000.0, 45.0, 0.8}, "nlp", fixture.now);
  CHECK(nlp->gpu_hours_used == doctest::Approx(24.0));
  CHECK(nlp->slot_hours_used == doctest::Approx(40.0));
  CHECK(nlp->kind == QuotaKind::near);
  CHECK(nlp->message.find("24.0 of 1000 GPU-hours (2 %) and 40.0 of 45 slot-hours (88 %)") != std::string::npos);
  // An hour later the running run has 2 more GPU-hours.
  CHECK(check_quota(fixture.db, QuotaBudget{}, "nlp", at("2026-12-03T13:00:00"))->gpu_hours_used == doctest::Approx(26.0));

  Result<QuotaVerdict> none = check_quota(fixture.db, std::nullopt, "vision", fixture.now);
  CHECK(none->kind == QuotaKind::none);
  CHECK(none->gpu_hours_used == doctest::Approx(66.0));
  CHECK(check_quota(fixture.db, QuotaBudget{10.0, std::nullopt, 0.8}, "robotics", fixture.now)->kind == QuotaKind::ok);
  CHECK(std::string(quota_kind_name(QuotaKind::over)) == "over");
}

TEST_CASE("history: newest first with hours, failures, duration and filters") {
  Fixture fixture;
  HistoryQuery query;
  query.now_ms = fixture.now;
  Result<HistoryPage> all = history(fixture.db, query);
  REQUIRE(all.ok());
  CHECK(all->matching == 4);
  REQUIRE(all->rows.size() == 4);
  CHECK(all->rows[0].run.id == "running");
  CHECK(all->rows[1].run.id == "shrink");
  CHECK(all->rows[2].run.id == "cpu");
  CHECK(all->rows[3].run.id == "cross");
  std::map<std::string, HistoryRow> by_id;
  for (const HistoryRow& row : all->rows) by_id[row.run.id] = row;
  CHECK(by_id["cross"].gpu_hours == doctest::Approx(48.0));
  CHECK(*by_id["cross"].duration_ms == 6 * 3600000);
  CHECK(by_id["shrink"].gpu_hours == doctest::Approx(34.0));
  CHECK(by_id["shrink"].failures == 2);
  CHECK(by_id["shrink"].root_cause_failures == 1);
  CHECK(*by_id["shrink"].duration_ms == 6 * 3600000 + 1800000);
  CHECK(by_id["shrink"].run.exit_reason == "rank 0 diverged");
  CHECK(by_id["running"].gpu_hours == doctest::Approx(24.0));
  CHECK(*by_id["running"].duration_ms == 12 * 3600000);  // still running: up to now
  CHECK(by_id["cpu"].slot_hours == doctest::Approx(40.0));
  CHECK(by_id["cpu"].gpu_hours == 0);
  CHECK(by_id["cpu"].failures == 0);

  query.tenant = "vision";
  CHECK(history(fixture.db, query)->rows.size() == 2);
  query.tenant.reset();
  query.state = "running";
  CHECK(history(fixture.db, query)->rows.at(0).run.id == "running");
  query.state.reset();
  query.user = "carol";
  CHECK(history(fixture.db, query)->matching == 2);
  query.user.reset();
  query.since_ms = at("2026-12-01T00:00:00");  // submitted on or after
  query.until_ms = at("2026-12-02T00:00:00");
  Result<HistoryPage> day = history(fixture.db, query);
  REQUIRE(day->rows.size() == 1);
  CHECK(day->rows[0].run.id == "shrink");
  query.since_ms.reset();
  query.until_ms.reset();
  query.limit = 1;
  Result<HistoryPage> newest = history(fixture.db, query);
  CHECK(newest->matching == 4);
  REQUIRE(newest->rows.size() == 1);
  CHECK(newest->rows[0].run.id == "running");
  query.tenant = "nobody";
  CHECK(history(fixture.db, query)->rows.empty());
}

TEST_CASE("audit: oldest first, the person either side of a sudo, the newest N") {
  Fixture fixture;
  REQUIRE(fixture.db.append_audit({1000, "alice", "submit", "cross", "", "job.yaml", "ok"}));
  REQUIRE(fixture.db.append_audit({2000, "root (sudo from alice)", "stop", "shrink", "", "--grace 10s", "ok"}));
  REQUIRE(fixture.db.append_audit({2000, "bob", "resume", "shrink", "", "", "ok"}));
  REQUIRE(fixture.db.append_audit({3000, "alice_x", "submit", "running", "", "job.yaml --over-quota", "ok"}));
  REQUIRE(fixture.db.append_audit({4000, "bob (sudo from alice)", "drill", "cpu", "gpu02", "", "refused"}));
  Result<std::vector<AuditRow>> all = audit_log(fixture.db, {});
  REQUIRE(all.ok());
  REQUIRE(all->size() == 5);
  CHECK((*all)[1].action == "stop");  // same millisecond: the order they were appended
  CHECK((*all)[2].action == "resume");

  AuditQuery alice;
  alice.actor = "alice";
  Result<std::vector<AuditRow>> hers = audit_log(fixture.db, alice);
  REQUIRE(hers->size() == 3);  // not alice_x
  CHECK((*hers)[0].action == "submit");
  CHECK((*hers)[1].actor == "root (sudo from alice)");
  CHECK((*hers)[2].actor == "bob (sudo from alice)");
  AuditQuery percent;
  percent.actor = "alice%";  // a wildcard in LIKE, an ordinary character here
  CHECK(audit_log(fixture.db, percent)->empty());

  AuditQuery of_run;
  of_run.run_id = "shrink";
  CHECK(audit_log(fixture.db, of_run)->size() == 2);
  AuditQuery action;
  action.action = "submit";
  action.since_ms = 1500;
  REQUIRE(audit_log(fixture.db, action)->size() == 1);
  CHECK(audit_log(fixture.db, action)->at(0).arguments == "job.yaml --over-quota");
  AuditQuery newest;
  newest.limit = 2;
  Result<std::vector<AuditRow>> last_two = audit_log(fixture.db, newest);
  REQUIRE(last_two->size() == 2);
  CHECK((*last_two)[0].at_ms == 3000);
  CHECK((*last_two)[1].at_ms == 4000);
}

TEST_CASE("host reliability: hours held, root causes blamed and cascades only counted, losses, exclusions") {
  Fixture fixture;
  Result<std::vector<HostReliability>> hosts = host_reliability(fixture.db, {std::nullopt, std::nullopt, fixture.now});
  REQUIRE(hosts.ok());
  std::map<std::string, HostReliability> by_host;
  for (const HostReliability& host : *hosts) by_host[host.host] = host;
  REQUIRE(by_host.size() == 5);
  CHECK(hosts->front().host == "cpu01");  // by name
  CHECK(by_host["gpu01"].gpu_hours == doctest::Approx(48.0));
  CHECK(by_host["gpu02"].gpu_hours == doctest::Approx(26.0));  // 10 + 16 over both generations
  CHECK(by_host["gpu02"].failures == 1);
  CHECK(by_host["gpu02"].root_cause_failures == 0);  // a cascade: listed, not blamed
  CHECK(*by_host["gpu02"].root_failures_per_1000_hours() == 0);
  const HostReliability& gpu03 = by_host["gpu03"];
  CHECK(gpu03.gpu_hours == doctest::Approx(8.0));
  CHECK(gpu03.root_cause_failures == 1);
  CHECK(*gpu03.root_failures_per_1000_hours() == doctest::Approx(125.0));  // 1 per 8 GPU-h
  CHECK(gpu03.times_lost == 1);
  CHECK(gpu03.times_excluded == 1);
  CHECK(*gpu03.last_excluded_ms == at("2026-12-02T02:10:00"));
  CHECK(gpu03.last_excluded_reason == "lost twice within 1h");
  CHECK(by_host["gpu04"].gpu_hours == doctest::Approx(24.0));
  CHECK(by_host["cpu01"].slot_hours == doctest::Approx(40.0));

  // From 12-02 02:05: gpu03's loss and its hours are before; the exclusion is inside.
  Result<std::vector<HostReliability>> later =
      host_reliability(fixture.db, {at("2026-12-02T02:05:00"), std::nullopt, fixture.now});
  std::map<std::string, HostReliability> later_by_host;
  for (const HostReliability& host : *later) later_by_host[host.host] = host;
  CHECK(later_by_host.count("gpu01") == 0);
  CHECK(later_by_host["gpu03"].gpu_hours == 0);
  CHECK(later_by_host["gpu03"].times_lost == 0);
  CHECK(later_by_host["gpu03"].times_excluded == 1);
  CHECK_FALSE(later_by_host["gpu03"].root_failures_per_1000_hours().has_value());
  CHECK(later_by_host["gpu02"].gpu_hours == doctest::Approx(25.0 / 60.0 * 4 + 16.0));  // 02:05 → 02:30, then gen 1
}

TEST_CASE("capacity: each known host every day, busy and idle unit-hours, the period ends at now") {
  Fixture fixture;
  CapacityQuery query;
  query.since_ms = at("2026-12-02T00:00:00");
  query.until_ms = at("2026-12-10T00:00:00");  // past now: the days after now are not idle time
  query.now_ms = fixture.now;
  Result<CapacityReport> report = capacity(fixture.db, query);
  REQUIRE(report.ok());
  std::map<std::string, CapacityDay> by_key;
  for (const CapacityDay& day : report->days) by_key[day.host + " " + day.day] = day;
  CHECK(report->days.size() == 5 * 2);  // five hosts, 12-02 and 12-03 (to noon)
  const CapacityDay& gpu02 = by_key["gpu02 2026-12-02"];
  CHECK(gpu02.capacity == 4);
  CHECK(gpu02.hours == doctest::Approx(24.0));
  CHECK(gpu02.busy_unit_hours == doctest::Approx(26.0));
  CHECK(gpu02.idle_unit_hours == doctest::Approx(70.0));
  CHECK(gpu02.busy_fraction == doctest::Approx(26.0 / 96.0));
  CHECK(by_key["gpu02 2026-12-03"].busy_unit_hours == 0);
  CHECK(by_key["gpu02 2026-12-03"].idle_unit_hours == doctest::Approx(48.0));  // 4 × 12 h
  const CapacityDay& gpu04 = by_key["gpu04 2026-12-03"];
  CHECK(gpu04.hours == doctest::Approx(12.0));
  CHECK(gpu04.busy_unit_hours == doctest::Approx(24.0));
  CHECK(gpu04.busy_fraction == doctest::Approx(1.0));
  CHECK(by_key["gpu01 2026-12-02"].capacity == 8);  // held 8 once, idle since
  CHECK(by_key["gpu01 2026-12-02"].idle_unit_hours == doctest::Approx(192.0));
  CHECK(by_key["cpu01 2026-12-03"].resource == "slot");
  CHECK(report->standing_out.empty());  // no host held 100 unit-hours in the period
  CHECK(day_of(at("2026-12-31T23:59:59")) == "2026-12-31");
}

TEST_CASE("capacity: a host's failure rate stands out above twice the median of hosts with enough hours") {
  TempDir home;
  Result<RegistryDb> db = RegistryDb::open(home.path + "/registry.db", true);
  REQUIRE(db.ok());
  // h1..h5: 8 GPUs × 100 h = 800 GPU-h each, with 0, 1, 1, 4 and 2 root-cause failures: 0, 1.25,
  // 1.25, 5 and 2.5 per 1,000 GPU-h, median 1.25. h4 (5 > 2.5, 4 failures) stands out; h5 (2.5,
  // not above twice the median) does not. h1's 5 cascades are not blamed. h6 held 10 GPU-h with 3
  // failures: below 100 unit-hours, not compared.
  std::map<std::string, std::pair<int, int>> failures = {{"h1", {0, 5}}, {"h2", {1, 0}}, {"h3", {1, 0}},
                                                         {"h4", {4, 0}}, {"h5", {2, 0}}, {"h6", {3, 0}}};
  REQUIRE(db->begin());
  for (const auto& [host, counts] : failures) {
    RunRow row = run("run-" + host, "t", "u", "2026-12-01T00:00:00", "succeeded");
    REQUIRE(db->insert_run(row));
    std::string end = host == "h6" ? "2026-12-01T01:15:00" : "2026-12-05T04:00:00";  // 100 h, or 1.25 h × 8
    REQUIRE(db->insert_allocation(held(row.id, 0, host, 8, "2026-12-01T00:00:00", end)));
    for (int i = 0; i < counts.first + counts.second; ++i) {
      REQUIRE(db->insert_failure({row.id, i, host, i, "worker.exited", i < counts.first, at("2026-12-01T01:00:00") + i, {}}));
    }
  }
  REQUIRE(db->commit());
  CapacityQuery query;
  query.since_ms = at("2026-12-01T00:00:00");
  query.until_ms = at("2026-12-06T00:00:00");
  query.now_ms = at("2026-12-20T00:00:00");
  Result<CapacityReport> report = capacity(*db, query);
  REQUIRE(report.ok());
  CHECK(report->compared_gpu_hosts == 5);
  REQUIRE(report->standing_out.size() == 1);
  const StandingOutHost& h4 = report->standing_out[0];
  CHECK(h4.host == "h4");
  CHECK(h4.unit_hours == doctest::Approx(800.0));
  CHECK(h4.root_cause_failures == 4);
  CHECK(h4.per_1000_hours == doctest::Approx(5.0));
  CHECK(h4.median_per_1000_hours == doctest::Approx(1.25));
}
