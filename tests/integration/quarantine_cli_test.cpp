// Quarantine across runs (issue 29) through the real dtrain binary: `dtrain hosts quarantine`
// keeps a host out of `dtrain plan` (which says why and how to bring it back) and out of a real
// run, whose spare takes its place and whose log records plan.quarantined; `dtrain hosts
// release` brings it back; both are audit rows; a plan that cannot do without the host is
// refused with the fix; a registry that cannot be read is a warning and the run goes on.
//
// Several hosts on one machine: loopback addresses (127.0.0.2, ...) reached through a fake `ssh`
// first on PATH that runs the remote command here, as flux-core's connector tests do. Each
// "host" gets its own real agent, and its workers real processes.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Three hosts and one spare, one slot each: any one host can be replaced by the spare.
std::string plan_spec(const std::string& extra = "") {
  return "version: 1\nname: q\nhosts: [qa-h1, qa-h2, qa-h3]\nspares: [qa-h4]\nslots_per_host: 1\n"
         "worker: {command: [\"true\"]}\n" + extra;
}

/// A fake ssh that runs the remote command on this machine: `ssh [options] -- HOST COMMAND`.
void install_fake_ssh(DtrainEnv& env) {
  std::string bin = env.dir.path + "/bin";
  std::filesystem::create_directories(bin);
  write_text(bin + "/ssh",
             "#!/bin/sh\n"
             "# fake ssh (tests): skip the options up to --, then the host; run the command here.\n"
             "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n"
             "shift; shift\n"
             "exec /bin/sh -c \"$1\"\n");
  std::filesystem::permissions(bin + "/ssh", std::filesystem::perms::owner_all);
  const char* path = std::getenv("PATH");
  env.environment.push_back({"PATH", bin + ":" + (path ? path : "/usr/bin:/bin")});
}

/// Two loopback hosts and a loopback spare through the fake ssh, running `command_yaml`.
std::string run_spec(const std::string& command_yaml = "[/bin/sh, -c, 'echo rank $RANK of $WORLD_SIZE']",
                     const std::string& extra = "") {
  return std::string("version: 1\nname: qrun\nhosts: [127.0.0.2, 127.0.0.3]\nspares: [127.0.0.4]\nslots_per_host: 1\n") +
         "ssh:\n  client: openssh\n  remote_dtrain: " + DTRAIN_EXE + "\n" + "worker:\n  command: " + command_yaml +
         "\nheartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\nstop_grace: 2s\n" + extra;
}

std::vector<std::string> plan_hosts(const std::vector<nlohmann::json>& events) {
  std::vector<nlohmann::json> plans = events_named(events, "plan.generation");
  if (plans.empty()) return {};
  return plans.front()["hosts"].get<std::vector<std::string>>();
}

bool has_host(const std::vector<std::string>& hosts, const std::string& host) {
  return std::find(hosts.begin(), hosts.end(), host) != hosts.end();
}

/// The host names of `dtrain plan --json`'s plan (its "without" and notes name left-out hosts too).
std::vector<std::string> planned_hosts(const nlohmann::json& output) {
  std::vector<std::string> names;
  for (const nlohmann::json& host : output["plan"]["hosts"]) names.push_back(host.value("name", ""));
  return names;
}

}  // namespace

TEST_CASE("dtrain hosts quarantine: plan leaves the host out and says why, release brings it back, both audited") {
  DtrainEnv env;
  std::string spec = env.write_spec("q.yaml", plan_spec());

  DtrainProcess quarantined = env.run({"hosts", "quarantine", "qa-h2", "--reason", "NIC flaps", "--for", "2d"});
  INFO(quarantined.out(), quarantined.err());
  REQUIRE(quarantined.exit_code == 0);
  CHECK(contains(quarantined.out(), "qa-h2 quarantined until "));

  DtrainProcess listed = env.run({"hosts", "--quarantined"});
  REQUIRE(listed.exit_code == 0);
  CHECK(contains(listed.out(), "qa-h2"));
  CHECK(contains(listed.out(), "NIC flaps"));
  CHECK(contains(listed.out(), "manual"));
  DtrainProcess listed_json = env.run({"hosts", "--quarantined", "--json"});
  REQUIRE(listed_json.exit_code == 0);
  nlohmann::json listing = nlohmann::json::parse(listed_json.out(), nullptr, false);
  REQUIRE(listing.is_object());
  REQUIRE(listing["hosts"].size() == 1);
  CHECK(listing["hosts"][0]["host"] == "qa-h2");
  CHECK(listing["hosts"][0]["source"] == "manual");
  CHECK(listing["hosts"][0]["reason"] == "NIC flaps");

  // The plan: qa-h2 left out, the spare in its place, and the reason and the fix said.
  DtrainProcess planned = env.run({"plan", spec});
  INFO(planned.out(), planned.err());
  REQUIRE(planned.exit_code == 0);
  CHECK(contains(planned.out(), "left out qa-h2: quarantined by hand until "));
  CHECK(contains(planned.out(), ": NIC flaps; `dtrain hosts release qa-h2` brings it back"));
  DtrainProcess planned_json = env.run({"plan", spec, "--json"});
  REQUIRE(planned_json.exit_code == 0);
  nlohmann::json plan = nlohmann::json::parse(planned_json.out(), nullptr, false);
  REQUIRE(plan.is_object());
  REQUIRE(plan["quarantined"].size() == 1);
  CHECK(plan["quarantined"][0]["host"] == "qa-h2");
  CHECK(plan["quarantined"][0]["reason"] == "NIC flaps");
  CHECK(!has_host(planned_hosts(plan), "qa-h2"));
  CHECK(has_host(planned_hosts(plan), "qa-h4"));

  DtrainProcess released = env.run({"hosts", "release", "qa-h2", "--reason", "cable replaced"});
  REQUIRE(released.exit_code == 0);
  CHECK(contains(released.out(), "qa-h2 released"));
  DtrainProcess again = env.run({"hosts", "release", "qa-h2"});
  REQUIRE(again.exit_code == 0);
  CHECK(contains(again.out(), "qa-h2 was not quarantined"));
  DtrainProcess replanned = env.run({"plan", spec, "--json"});
  REQUIRE(replanned.exit_code == 0);
  nlohmann::json after = nlohmann::json::parse(replanned.out(), nullptr, false);
  REQUIRE(after.is_object());
  CHECK(after["quarantined"].empty());
  CHECK(has_host(planned_hosts(after), "qa-h2"));
  CHECK(!has_host(planned_hosts(after), "qa-h4"));
  CHECK(contains(env.run({"hosts", "--quarantined"}).out(), "no host is quarantined"));

  // Who, when and why: one audit row for each change, the note-only release too.
  DtrainProcess audit = env.run({"audit", "--json"});
  REQUIRE(audit.exit_code == 0);
  nlohmann::json rows = nlohmann::json::parse(audit.out(), nullptr, false);
  REQUIRE(rows.is_object());
  std::vector<nlohmann::json> quarantine_rows, release_rows;
  for (const nlohmann::json& row : rows["rows"]) {
    if (row.value("action", "") == "hosts quarantine") quarantine_rows.push_back(row);
    if (row.value("action", "") == "hosts release") release_rows.push_back(row);
  }
  REQUIRE(quarantine_rows.size() == 1);
  CHECK(quarantine_rows[0]["target"] == "qa-h2");
  CHECK(contains(quarantine_rows[0].dump(), "NIC flaps"));
  CHECK(!quarantine_rows[0].value("actor", "").empty());
  REQUIRE(release_rows.size() == 2);
  CHECK(contains(release_rows[0].dump(), "cable replaced"));
  CHECK(contains(release_rows[1].dump(), "not quarantined"));
}

TEST_CASE("a plan that cannot do without a quarantined host is refused with the host, the reason and the fix") {
  DtrainEnv env;
  std::string spec = env.write_spec("tight.yaml",
                                    "version: 1\nname: tight\nhosts: [qa-h1, qa-h2]\nslots_per_host: 1\n"
                                    "worker: {command: [\"true\"]}\nparallelism: {data: 2}\n");
  // A duration that is none, or one past 3650d, is refused before anything is written.
  DtrainProcess bad_for = env.run({"hosts", "quarantine", "qa-h1", "--reason", "Xid 79", "--for", "5y"});
  CHECK(bad_for.exit_code == 2);
  CHECK(contains(bad_for.err(), "--for: '5y' is not a duration"));
  CHECK(env.run({"hosts", "quarantine", "qa-h1", "--reason", "Xid 79", "--for", "4000d"}).exit_code == 2);
  REQUIRE(env.run({"hosts", "quarantine", "qa-h1", "--reason", "Xid 79"}).exit_code == 0);
  DtrainProcess planned = env.run({"plan", spec});
  INFO(planned.out(), planned.err());
  CHECK(planned.exit_code == 2);
  CHECK(contains(planned.err(), "quarantined in the registry: qa-h1 (Xid 79, until "));
  CHECK(contains(planned.err(), "`dtrain hosts release qa-h1`"));
  DtrainProcess submitted = env.run({"submit", spec});
  CHECK(submitted.exit_code == 2);
  CHECK(contains(submitted.err(), "`dtrain hosts release qa-h1`"));
  CHECK(env.run_dirs().empty());

  // Allowed to shrink (elastic.min_hosts): the plan goes on with the other host.
  std::string elastic = env.write_spec("elastic.yaml",
                                       "version: 1\nname: elastic\nhosts: [qa-h1, qa-h2]\nslots_per_host: 1\n"
                                       "worker: {command: [\"true\"]}\nelastic: {min_hosts: 1}\n");
  DtrainProcess shrunk = env.run({"plan", elastic, "--json"});
  INFO(shrunk.out(), shrunk.err());
  REQUIRE(shrunk.exit_code == 0);
  nlohmann::json plan = nlohmann::json::parse(shrunk.out(), nullptr, false);
  REQUIRE(plan.is_object());
  CHECK(plan["plan"]["world_size"] == 1);
  CHECK(!has_host(planned_hosts(plan), "qa-h1"));
}

TEST_CASE("a run uses the spare in place of a quarantined host, starts no agent there, and uses it again once released") {
  DtrainEnv env;
  install_fake_ssh(env);
  std::string spec = env.write_spec("run.yaml", run_spec());
  REQUIRE(env.run({"hosts", "quarantine", "127.0.0.3", "--reason", "ECC errors"}).exit_code == 0);

  DtrainProcess first = env.run({"submit", spec});
  INFO(first.out(), first.err());
  REQUIRE(first.exit_code == 0);
  CHECK(contains(first.err(), "left out 127.0.0.3: quarantined by hand until "));
  REQUIRE(env.run_dirs().size() == 1);
  std::string first_dir = env.run_dirs()[0];
  std::vector<nlohmann::json> events = read_events(first_dir + "/events.jsonl");
  std::vector<nlohmann::json> left_out = events_named(events, "plan.quarantined");
  REQUIRE(left_out.size() == 1);
  REQUIRE(left_out[0]["hosts"].size() == 1);
  CHECK(left_out[0]["hosts"][0]["host"] == "127.0.0.3");
  CHECK(left_out[0]["hosts"][0]["reason"] == "ECC errors");
  CHECK(!left_out[0]["hosts"][0].value("until", "").empty());
  std::vector<std::string> hosts = plan_hosts(events);
  CHECK(has_host(hosts, "127.0.0.2"));
  CHECK(has_host(hosts, "127.0.0.4"));
  CHECK(!has_host(hosts, "127.0.0.3"));
  for (const nlohmann::json& connected : events_named(events, "host.connected")) {
    CHECK(connected["host"] != "127.0.0.3");  // no agent was started there
  }
  check_nothing_left(run_id_of(first_dir));

  REQUIRE(env.run({"hosts", "release", "127.0.0.3"}).exit_code == 0);
  DtrainProcess second = env.run({"submit", spec});
  INFO(second.out(), second.err());
  REQUIRE(second.exit_code == 0);
  CHECK(!contains(second.err(), "left out"));
  std::vector<std::string> dirs = env.run_dirs();
  REQUIRE(dirs.size() == 2);
  std::string second_dir = dirs[0] == first_dir ? dirs[1] : dirs[0];
  std::vector<nlohmann::json> second_events = read_events(second_dir + "/events.jsonl");
  CHECK(events_named(second_events, "plan.quarantined").empty());
  CHECK(has_host(plan_hosts(second_events), "127.0.0.3"));
  check_nothing_left(run_id_of(second_dir));
}

TEST_CASE("a registry that cannot be read: a warning, and the run goes on with every host") {
  DtrainEnv env;
  std::filesystem::create_directories(env.home());
  write_text(env.home() + "/registry.db", "this is not an SQLite database, it is a damaged file of 64 bytes...\n");
  std::string spec = env.write_spec("local.yaml",
                                    "version: 1\nname: advisory\nslots_per_host: 2\n"
                                    "worker:\n  command: [/bin/sh, -c, 'echo rank $RANK']\n"
                                    "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n");
  DtrainProcess planned = env.run({"plan", spec});
  INFO(planned.out(), planned.err());
  CHECK(planned.exit_code == 0);
  CHECK(contains(planned.err(), "warning: quarantined hosts not checked"));
  DtrainProcess submitted = env.run({"submit", spec});
  INFO(submitted.out(), submitted.err());
  CHECK(submitted.exit_code == 0);
  CHECK(contains(submitted.err(), "warning: quarantined hosts not checked, every host of the spec is planned"));
  REQUIRE(env.run_dirs().size() == 1);
  std::vector<nlohmann::json> events = read_events(env.run_dirs()[0] + "/events.jsonl");
  CHECK(events_named(events, "plan.quarantined").empty());
  CHECK(events_named(events, "worker.exit").size() == 2);
  check_nothing_left(run_id_of(env.run_dirs()[0]));
}

TEST_CASE("a host that causes 3 crashes in one run is quarantined, and the next submit on the same hosts uses the spare and says why") {
  DtrainEnv env;
  install_fake_ssh(env);
  // Rank 1 (on 127.0.0.3) exits 3 at every start; nothing excludes the host within the run
  // (exclude_after 10), so after three failures the supervisor's quarantine rule names it.
  std::string crashing = env.write_spec(
      "crash.yaml", run_spec("[/bin/sh, -c, 'if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 30']",
                             "elastic: {max_restarts: 3, exclude_after: 10, crash_loop_after: 10}\n"));
  DtrainProcess crashed = env.run({"submit", crashing});
  INFO(crashed.out(), crashed.err());
  CHECK(crashed.exit_code == 1);
  REQUIRE(env.run_dirs().size() == 1);
  std::string crashed_dir = env.run_dirs()[0];
  std::vector<nlohmann::json> quarantined = events_named(read_events(crashed_dir + "/events.jsonl"), "host.quarantined");
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0]["host"] == "127.0.0.3");
  check_nothing_left(run_id_of(crashed_dir));

  // The supervisor's registry writer took it in: listed, with the run as its source.
  DtrainProcess listed = env.run({"hosts", "--quarantined", "--json"});
  INFO(listed.out(), listed.err());
  nlohmann::json listing = nlohmann::json::parse(listed.out(), nullptr, false);
  REQUIRE(listing.is_object());
  REQUIRE(listing["hosts"].size() == 1);
  CHECK(listing["hosts"][0]["host"] == "127.0.0.3");
  CHECK(listing["hosts"][0]["source"] == run_id_of(crashed_dir));

  std::string healthy = env.write_spec("healthy.yaml", run_spec());
  DtrainProcess next = env.run({"submit", healthy});
  INFO(next.out(), next.err());
  REQUIRE(next.exit_code == 0);
  CHECK(contains(next.err(), "left out 127.0.0.3: quarantined by run " + run_id_of(crashed_dir)));
  CHECK(contains(next.err(), "root cause of 3 failures"));
  std::vector<std::string> dirs = env.run_dirs();
  REQUIRE(dirs.size() == 2);
  std::string next_dir = dirs[0] == crashed_dir ? dirs[1] : dirs[0];
  std::vector<std::string> hosts = plan_hosts(read_events(next_dir + "/events.jsonl"));
  CHECK(has_host(hosts, "127.0.0.4"));
  CHECK(!has_host(hosts, "127.0.0.3"));
  check_nothing_left(run_id_of(next_dir));
}

TEST_CASE("dtrain resume plans without a host quarantined since the run began, and records it") {
  DtrainEnv env;
  install_fake_ssh(env);
  // Rank 1 fails at once: the run fails (no restarts) and can be resumed.
  std::string spec = env.write_spec("fails.yaml", run_spec("[/bin/sh, -c, 'if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 30']"));
  DtrainProcess failed = env.run({"submit", spec});
  INFO(failed.out(), failed.err());
  REQUIRE(failed.exit_code == 1);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  CHECK(has_host(plan_hosts(read_events(dir + "/events.jsonl")), "127.0.0.3"));

  REQUIRE(env.run({"hosts", "quarantine", "127.0.0.3", "--reason", "link flaps"}).exit_code == 0);
  DtrainProcess resumed = env.run({"resume", run_id_of(dir)});
  INFO(resumed.out(), resumed.err());
  CHECK(resumed.exit_code == 1);  // rank 1, now on the spare, fails again
  CHECK(contains(resumed.err(), "dtrain resume: left out 127.0.0.3: quarantined by hand"));
  std::vector<nlohmann::json> events = read_events(dir + "/events.jsonl");
  std::vector<nlohmann::json> left_out = events_named(events, "plan.quarantined");
  REQUIRE(left_out.size() == 1);
  CHECK(left_out[0]["hosts"][0]["host"] == "127.0.0.3");
  std::vector<nlohmann::json> plans = events_named(events, "plan.generation");
  REQUIRE(plans.size() >= 2);
  std::vector<std::string> resumed_hosts = plans.back()["hosts"].get<std::vector<std::string>>();
  CHECK(has_host(resumed_hosts, "127.0.0.4"));
  CHECK(!has_host(resumed_hosts, "127.0.0.3"));
  check_nothing_left(run_id_of(dir));
}
