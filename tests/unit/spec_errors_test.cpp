// Every class of spec error, with the exact place it is reported at (file:line:col, 1-based),
// the dotted key, the quoted value and the fix.

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "launcher/spec/spec_loader.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::spec;

namespace {

using dtrain::testing::TempDir;

const std::string kWorker = "worker:\n  command: [python3, train.py]\n";

LoadResult parse(const std::string& text, const std::vector<Override>& overrides = {}) {
  return parse_job_spec(text, "job.yaml", ".", overrides);
}

// The one diagnostic a spec must produce, as "file:line:col: key: message".
std::string only_error(const LoadResult& result) {
  REQUIRE_FALSE(result.ok());
  REQUIRE_MESSAGE(result.diagnostics.size() == 1, result.message());
  return result.diagnostics[0].to_string();
}

std::string only_error(const std::string& text, const std::vector<Override>& overrides = {}) {
  return only_error(parse(text, overrides));
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("Diagnostic::to_string: where, key, what") {
  CHECK(Diagnostic{"job.yaml", 12, 3, "heartbeat.timeout", "bad"}.to_string() == "job.yaml:12:3: heartbeat.timeout: bad");
  CHECK(Diagnostic{"--set", 0, 0, "a.b", "bad"}.to_string() == "--set: a.b: bad");
  CHECK(Diagnostic{"job.yaml", 0, 0, "", "empty"}.to_string() == "job.yaml: empty");
}

TEST_CASE("YAML syntax errors are reported at their place, never thrown") {
  std::string error = only_error("version: 1\nworker:\n  command: [a, b\n");
  CHECK(contains(error, "job.yaml:4:1: YAML syntax error: "));
  error = only_error("version: 1\nname: a\n name: b\n");
  CHECK(contains(error, "job.yaml:3:6: YAML syntax error: "));
  error = only_error("version: 1\nhosts: [gpu[01-04]]\n");
  CHECK(contains(error, "a hostlist inside [ ] must be quoted"));
}

TEST_CASE("an empty spec, a non-mapping top level and a missing file are clear errors") {
  CHECK(contains(only_error(""), "job.yaml: the spec is empty; start it with:"));
  CHECK(contains(only_error("# only a comment\n"), "job.yaml: the spec is empty"));
  CHECK(only_error("- a\n- b\n") ==
        "job.yaml:1:1: the top level must be a mapping of keys (version: 1, hosts: [...], worker: {...}), got a list");
  LoadResult missing = load_job_spec("/nonexistent/dir/job.yaml");
  CHECK(contains(only_error(missing), "/nonexistent/dir/job.yaml: cannot read '/nonexistent/dir/job.yaml': No such file or directory"));
  TempDir dir;
  CHECK(contains(only_error(load_job_spec(dir.path)), "is a directory"));
}

TEST_CASE("version: missing is an error with the fix, another version stops there") {
  CHECK(only_error("name: x\n" + kWorker) == "job.yaml:1:1: version: the spec has no version; add `version: 1` as its first line");
  CHECK(only_error("version: 2\nbogus: 1\n" + kWorker) ==
        "job.yaml:1:10: version: '2' is not a spec version this dtrain reads; write `version: 1`");
}

TEST_CASE("unknown keys get 'did you mean' at every level") {
  CHECK(only_error("version: 1\nhearbeat: {interval: 1s}\n" + kWorker) ==
        "job.yaml:2:1: hearbeat: unknown key 'hearbeat'; did you mean 'heartbeat'?");
  CHECK(only_error("version: 1\nssh:\n  prot: 22\n" + kWorker) ==
        "job.yaml:3:3: ssh.prot: unknown key 'prot'; did you mean 'port'?");
  CHECK(only_error("version: 1\nworker:\n  comand: [x]\n  command: [x]\n") ==
        "job.yaml:3:3: worker.comand: unknown key 'comand'; did you mean 'command'?");
  CHECK(only_error("version: 1\nhosts:\n  - {name: a, slot: 2}\n" + kWorker) ==
        "job.yaml:3:15: hosts[0].slot: unknown key 'slot'; did you mean 'slots'?");
  CHECK(only_error("version: 1\nelastic: {zzzzzz: 1}\n" + kWorker) ==
        "job.yaml:2:11: elastic.zzzzzz: unknown key 'zzzzzz'; known keys here: min_hosts, max_restarts, "
        "restart_window, exclude_after, crash_loop_after, progress_window, in_place, in_place_timeout, standby_per_host");
}

TEST_CASE("a key given twice is an error at the second") {
  CHECK(only_error("version: 1\nname: a\nname: b\n" + kWorker) == "job.yaml:3:1: name: key 'name' is given twice; keep one");
}

TEST_CASE("wrong types say what was expected and quote the value") {
  CHECK(only_error("version: 1\nslots_per_host: four\n" + kWorker) ==
        "job.yaml:2:17: slots_per_host: expected a whole number of at least 1, got 'four'");
  CHECK(only_error("version: 1\nslots_per_host: 0\n" + kWorker) ==
        "job.yaml:2:17: slots_per_host: expected a whole number of at least 1, got '0'");
  CHECK(only_error("version: 1\nslots_per_host: [1]\n" + kWorker) ==
        "job.yaml:2:17: slots_per_host: expected a whole number of at least 1, got a list");
  CHECK(only_error("version: 1\nssh: 5\n" + kWorker) ==
        "job.yaml:2:6: ssh: expected a mapping of keys (user, port, identity, known_hosts, host_key_policy, "
        "connect_timeout, max_parallel, remote_dtrain, client, config), got '5'");
  CHECK(only_error("version: 1\nssh: {port: 0}\n" + kWorker) ==
        "job.yaml:2:13: ssh.port: expected a whole number from 1 to 65535, got '0'");
  CHECK(only_error("version: 1\nname: [a]\n" + kWorker) == "job.yaml:2:7: name: expected a string, got a list");
  CHECK(only_error("version: 1\nname: my job\n" + kWorker) ==
        "job.yaml:2:7: name: 'my job' may hold only letters, digits, '.', '_' and '-' (at most 64); write e.g. bert-large");
  CHECK(only_error("version: 1\nparallelism: {tensor: 0}\n" + kWorker) ==
        "job.yaml:2:23: parallelism.tensor: expected a whole number of at least 1, got '0'");
  CHECK(only_error("version: 1\nparallelism: {data: many}\n" + kWorker) ==
        "job.yaml:2:21: parallelism.data: expected a whole number of at least 1 or \"auto\", got 'many'");
  CHECK(only_error("version: 1\ncheckpoint: {keep: 0}\n" + kWorker) ==
        "job.yaml:2:20: checkpoint.keep: expected a whole number of at least 1, got '0'");
  CHECK(only_error("version: 1\nssh: {max_parallel: -1}\n" + kWorker) ==
        "job.yaml:2:21: ssh.max_parallel: expected a whole number of at least 1, got '-1'");
}

TEST_CASE("choices get 'did you mean'") {
  CHECK(only_error("version: 1\nssh: {host_key_policy: strickt}\n" + kWorker) ==
        "job.yaml:2:24: ssh.host_key_policy: 'strickt' is not one of strict, accept-new, insecure; did you mean 'strict'?");
  CHECK(only_error("version: 1\nworker: {command: [x], backend: mpi}\n") ==
        "job.yaml:2:33: worker.backend: 'mpi' is not one of auto, gloo, nccl");
}

TEST_CASE("durations need a unit") {
  CHECK(only_error("version: 1\nheartbeat: {timeout: 5x}\n" + kWorker) ==
        "job.yaml:2:22: heartbeat.timeout: '5x' has unknown unit 'x'; write a number with a unit: 500ms, 10s, 5m or 1h");
  CHECK(only_error("version: 1\nstop_grace: 30\n" + kWorker) ==
        "job.yaml:2:13: stop_grace: '30' has no unit; write a number with a unit: 500ms, 10s, 5m or 1h");
  CHECK(only_error("version: 1\nssh: {connect_timeout: 0s}\n" + kWorker) ==
        "job.yaml:2:24: ssh.connect_timeout: '0s' is too short; it must be at least 1ms");
}

TEST_CASE("heartbeat timeouts must nest: interval < timeout < hang_timeout") {
  CHECK(only_error("version: 1\nheartbeat:\n  interval: 10s\n  timeout: 5s\n" + kWorker) ==
        "job.yaml:4:12: heartbeat.timeout: timeouts must nest as interval < timeout < hang_timeout, but here "
        "interval '10s', timeout '5s', hang_timeout 'auto'; make timeout longer than interval (several beats, e.g. '100s')");
  CHECK(only_error("version: 1\nheartbeat:\n  timeout: 2m\n  hang_timeout: 1m\n" + kWorker) ==
        "job.yaml:4:17: heartbeat.hang_timeout: timeouts must nest as interval < timeout < hang_timeout, but here "
        "interval '1s', timeout '2m', hang_timeout '1m'; make hang_timeout longer than timeout (e.g. '12m'), or 'auto'");
  // Only one key set: the error points at it, and the default it collides with is named.
  CHECK(only_error("version: 1\nheartbeat:\n  interval: 20s\n" + kWorker) ==
        "job.yaml:3:13: heartbeat.interval: timeouts must nest as interval < timeout < hang_timeout, but here "
        "interval '20s', timeout '10s', hang_timeout 'auto'; make timeout longer than interval (several beats, e.g. '200s')");
}

TEST_CASE("heartbeat.hang_timeout: a duration or auto") {
  CHECK(only_error("version: 1\nheartbeat:\n  hang_timeout: soon\n" + kWorker) ==
        "job.yaml:3:17: heartbeat.hang_timeout: expected \"auto\" or a duration such as 500ms, 10s, 5m or 1h, got 'soon'");
  // With auto, checkpoint_timeout is not compared with a value not yet known (it is at least
  // the hang timeout in force at run time).
  CHECK(parse("version: 1\nheartbeat:\n  checkpoint_timeout: 30s\n" + kWorker).ok());
}

TEST_CASE("heartbeat.checkpoint_timeout may not be shorter than hang_timeout") {
  CHECK(only_error("version: 1\nheartbeat:\n  hang_timeout: 5m\n  checkpoint_timeout: 2m\n" + kWorker) ==
        "job.yaml:4:23: heartbeat.checkpoint_timeout: checkpoint_timeout '2m' is shorter than hang_timeout '5m': a "
        "rank in a checkpoint save would get less time than one training; make it at least '5m' or remove it "
        "(default: 10m)");
}

TEST_CASE("passwords are refused anywhere in the spec, but not as env variable names") {
  const std::string fix = "passwords are not accepted; use an SSH key (ssh.identity) or ssh-agent";
  CHECK(only_error("version: 1\nssh:\n  password: hunter2\n" + kWorker) == "job.yaml:3:3: ssh.password: " + fix);
  CHECK(only_error("version: 1\npassword: x\n" + kWorker) == "job.yaml:2:1: password: " + fix);
  CHECK(only_error("version: 1\nssh: {Passphrase: x}\n" + kWorker) == "job.yaml:2:7: ssh.Passphrase: " + fix);
  CHECK(only_error("version: 1\nhosts: [{name: a, passwd: x}]\n" + kWorker) == "job.yaml:2:19: hosts[0].passwd: " + fix);
  CHECK(parse("version: 1\nworker:\n  command: [x]\n  env: {password: x, DB_PASSWORD: y}\n").ok());
}

TEST_CASE("worker.command must be an argv list") {
  CHECK(only_error("version: 1\nworker:\n  command: python3 train.py --lr 0.1\n") ==
        "job.yaml:3:12: worker.command: 'python3 train.py --lr 0.1' is a single string, and dtrain runs no shell; "
        "write it as a list: [python3, train.py, --lr, 0.1]");
  CHECK(only_error("version: 1\nworker:\n  command: []\n") ==
        "job.yaml:3:12: worker.command: the command is empty; write the program and its arguments: [python3, train.py]");
  CHECK(only_error("version: 1\nworker:\n  command: [a, [b]]\n") ==
        "job.yaml:3:16: worker.command[1]: expected a string, got a list");
  CHECK(only_error("version: 1\nworker:\n  workdir: /x\n") ==
        "job.yaml:3:3: worker.command: worker.command is missing; add command: [python3, train.py]");
  CHECK(only_error("version: 1\n") ==
        "job.yaml: worker: the spec has no worker section; add worker: {command: [python3, train.py]}");
  CHECK(only_error("version: 1\nworker:\n  command: [x]\n  env: {1X: a}\n") ==
        "job.yaml:4:9: worker.env.1X: '1X' is not an environment variable name; use letters, digits and '_'");
}

TEST_CASE("host errors: bad expressions, duplicates, empty lists, hosts with hostfile") {
  CHECK(only_error("version: 1\nhosts:\n  - gpu[01-04\n" + kWorker) ==
        "job.yaml:3:5: hosts[0]: 'gpu[01-04' has a '[' without ']'");
  CHECK(only_error("version: 1\nhosts:\n  - a:99999\n" + kWorker) ==
        "job.yaml:3:5: hosts[0]: 'a:99999': port '99999' is not a number from 1 to 65535");
  CHECK(only_error("version: 1\nhosts:\n  - gpu[01-02]\n  - gpu02\n" + kWorker) ==
        "job.yaml:4:5: hosts[1]: host 'gpu02' is listed twice (first at job.yaml:3:5); list each host once");
  CHECK(only_error("version: 1\nhosts: [a]\nspares: [a]\n" + kWorker) ==
        "job.yaml:3:10: spares[0]: host 'a' is listed twice (first at job.yaml:2:9); list each host once");
  CHECK(only_error("version: 1\nhosts: []\n" + kWorker) ==
        "job.yaml:2:8: hosts: the list is empty; name at least one host, or remove 'hosts' to run on localhost");
  CHECK(only_error("version: 1\nhosts: [a]\nhostfile: hf\n" + kWorker) ==
        "job.yaml:3:11: hostfile: hosts and hostfile are both set; use one of them");
  CHECK(only_error("version: 1\nhosts: [{slots: 2}]\n" + kWorker) ==
        "job.yaml:2:9: hosts[0]: a host mapping needs a name: {name: gpu01, slots: 8}");
  CHECK(only_error("version: 1\nhosts: [{name: a, slots: 4, only_slots: [0]}]\n" + kWorker) ==
        "job.yaml:2:26: hosts[0].slots: slots is 4 but only_slots lists 1; drop slots or make them agree");
}

TEST_CASE("include/exclude errors point at the filter and name the hosts") {
  CHECK(only_error("version: 1\nhosts: [worker-0, worker-1]\ninclude: worker-0@worker-7\n" + kWorker) ==
        "job.yaml:3:10: include: unknown host 'worker-7'; did you mean 'worker-0'? (known hosts: worker-0, worker-1)");
  CHECK(only_error("version: 1\nhosts: [a, b]\ninclude: a\nexclude: b\n" + kWorker) ==
        "job.yaml:4:10: exclude: include and exclude are both set; use one of them");
}

TEST_CASE("hostfile and env_file problems carry their own file:line:col") {
  TempDir dir;
  dir.write("hosts.txt", "worker-1 slots=4\nworker-2 slots=many\n");
  dir.write("bad.env", "GOOD=1\nnot a line\n");
  std::string spec = dir.write("job.yaml", "version: 1\nhostfile: hosts.txt\nworker:\n  command: [x]\n  env_file: bad.env\n");
  LoadResult result = load_job_spec(spec);
  REQUIRE_FALSE(result.ok());
  REQUIRE_MESSAGE(result.diagnostics.size() == 2, result.message());
  CHECK(result.diagnostics[0].to_string() == dir.path + "/bad.env:2:1: worker.env_file: 'not a line' is not a KEY=VALUE line; "
                                             "write NAME=value (NAME of letters, digits, '_')");
  CHECK(result.diagnostics[1].to_string() == dir.path + "/hosts.txt:2:10: hostfile: 'slots=many': slots must be a whole "
                                             "number of 1 or more, as in slots=4");

  std::string missing = dir.write("missing.yaml", "version: 1\nhostfile: nope.txt\nworker:\n  command: [x]\n  env_file: nope.env\n");
  result = load_job_spec(missing);
  REQUIRE(result.diagnostics.size() == 2);
  CHECK(result.diagnostics[0].to_string() == missing + ":2:11: hostfile: cannot read '" + dir.path +
                                                 "/nope.txt': No such file or directory; the path is relative to the spec file");
  CHECK(result.diagnostics[1].to_string() == missing + ":5:13: worker.env_file: cannot read '" + dir.path +
                                                 "/nope.env': No such file or directory; the path is relative to the spec file");
}

TEST_CASE("cross-key checks: batch divisibility and min_hosts") {
  CHECK(only_error("version: 1\nbatch: {global: 100, micro: 3}\n" + kWorker) ==
        "job.yaml:2:17: batch.global: '100' is not a multiple of batch.micro (3); make it a multiple such as 99 or 102");
  CHECK(only_error("version: 1\nbatch: {global: 2, micro: 3}\n" + kWorker) ==
        "job.yaml:2:17: batch.global: '2' is not a multiple of batch.micro (3); make it a multiple such as 3");
  CHECK(only_error("version: 1\nhosts: [a, b]\nelastic: {min_hosts: 3}\n" + kWorker) ==
        "job.yaml:3:22: elastic.min_hosts: '3' is more than the 2 hosts the job has; make it at most 2");
}

TEST_CASE("overrides: problems say --set and the key") {
  auto set = [](const char* text) { return *parse_override(text); };
  CHECK(only_error("version: 1\n" + kWorker, {set("heartbeat.intervl=2s")}) ==
        "--set: heartbeat.intervl: unknown key 'intervl'; did you mean 'interval'?");
  CHECK(only_error("version: 1\n" + kWorker, {set("elastic.max_restarts=-1")}) ==
        "--set: elastic.max_restarts: expected a whole number of at least 0, got '-1'");
  CHECK(only_error("version: 1\n" + kWorker, {set("hearbeat.interval=2s")}) ==
        "--set: hearbeat: unknown key 'hearbeat'; did you mean 'heartbeat'?");
  CHECK(only_error("version: 1\nname: x\n" + kWorker, {set("name.first=2")}) ==
        "--set: name.first: 'name' is 'x', not a section; set it whole: --set name=...");
  CHECK(contains(only_error("version: 1\n" + kWorker, {set("hosts=[a")}), "--set: hosts: '[a' is not a valid YAML value"));
  CHECK(only_error("version: 1\n" + kWorker, {set("heartbeat.interval=1m")}) ==
        "--set: heartbeat.interval: timeouts must nest as interval < timeout < hang_timeout, but here interval '1m', "
        "timeout '10s', hang_timeout 'auto'; make timeout longer than interval (several beats, e.g. '10m')");
  // A file value overridden by a good one is no longer an error.
  CHECK(parse("version: 1\nslots_per_host: 0\n" + kWorker, {set("slots_per_host=2")}).ok());
}

TEST_CASE("all problems are reported at once, in file order") {
  LoadResult result = parse(
      "version: 1\n"
      "hearbeat: {}\n"
      "slots_per_host: 0\n"
      "ssh: {port: x, password: y}\n"
      "worker:\n"
      "  command: python3 train.py\n"
      "stop_grace: 5\n");
  REQUIRE_FALSE(result.ok());
  std::vector<std::string> keys;
  for (const Diagnostic& diagnostic : result.diagnostics) keys.push_back(diagnostic.key);
  CHECK(keys == std::vector<std::string>{"hearbeat", "slots_per_host", "ssh.port", "ssh.password", "worker.command",
                                         "stop_grace"});
  CHECK(result.diagnostics[3].line == 4);
  CHECK(result.diagnostics[3].column == 16);
}

// Found by fuzz/spec_loader: yaml-cpp reads these leniently and to_yaml wrote them back changed
// (U+FFFD, a mangled NUL), so a resumed run would have had another argv or env.
TEST_CASE("bytes YAML does not allow are refused with their place, not read leniently") {
  CHECK(only_error("version: 1\nworker:\n  command: [py\xff]\n") ==
        "job.yaml:3:15: byte 0xff is not valid UTF-8; save the spec as UTF-8");
  CHECK(only_error(std::string("version: 1\nname: a\0b\n", 21) + kWorker) ==
        "job.yaml:2:8: byte 0x00 is a control character, which YAML does not allow raw; write it escaped in a "
        "double-quoted string, \"\\x00\"");
  CHECK(parse("version: 1\nworker: {command: [x], env: {A: \"a\\x01b \\u00e9 \xc3\xa9\"}}\n").ok());  // escaped, and UTF-8
  // An escaped NUL is YAML, but no environment can carry it (the worker would get "a").
  CHECK(contains(only_error("version: 1\nworker: {command: [x], env: {A: \"a\\x00b\"}}\n"),
                 "worker.env.A: the value holds a NUL byte"));
  CHECK(contains(only_error("version: 1\n" + kWorker, {Override{"name", "a\xc0\x80"}}),
                 "--set: name: byte 0xc0 in the value is not valid UTF-8"));
  TempDir dir;
  dir.write("latin1.env", "GOOD=1\nCITY=K\xf6ln\n");
  std::string spec = dir.write("job.yaml", "version: 1\nworker:\n  command: [x]\n  env_file: latin1.env\n");
  CHECK(contains(only_error(load_job_spec(spec)), "latin1.env:2:7: worker.env_file: the value of CITY is not valid UTF-8 (byte 0xf6)"));
}

TEST_CASE("control bytes in a value are shown escaped, so the message is never cut at a NUL") {
  std::string error = only_error(std::string("version: 1\nname: \"a\\0b\\e[31m\"\n") + kWorker);
  CHECK(error == "job.yaml:2:7: name: 'a\\x00b\\x1b[31m' may hold only letters, digits, '.', '_' and '-' (at most 64); "
                 "write e.g. bert-large");
  CHECK(error.find('\0') == std::string::npos);
  CHECK(contains(only_error("version: 1\n\"hear\\tbeat\": 1\n" + kWorker), "unknown key 'hear\\x09beat'"));
}

TEST_CASE("an env_file or spec that is a device or too large is refused, never read without end") {
  CHECK(contains(only_error(load_job_spec("/dev/zero")), "'/dev/zero' is a character device, not a regular file"));
  TempDir dir;
  std::string big = dir.path + "/big.yaml";
  {
    std::ofstream out(big);
    std::string line(1 << 20, '#');
    for (int i = 0; i < 17; ++i) out << line << "\n";
  }
  CHECK(contains(only_error(load_job_spec(big)), "MiB, over the 16 MiB limit; a job spec, hostfile or env_file is far smaller"));
  CHECK(contains(only_error("version: 1\nworker:\n  command: [x]\n  env_file: /dev/zero\n"),
                 "'/dev/zero' is a character device, not a regular file"));
}

TEST_CASE("a DEL byte in a value (a YAML escape or --set) is refused: spec.yaml could not be read back") {
  CHECK(contains(only_error("version: 1\nworker:\n  command: [\"py\\x7fthon3\"]\n"), "holds the control byte 0x7f (DEL)"));
  CHECK(contains(only_error("version: 1\n" + kWorker, {{"worker.command", "[py\x7fthon3, x.py]"}}),
                 "holds the control byte 0x7f (DEL)"));
  CHECK(contains(only_error("version: 1\n" + kWorker + "  env: {A: \"x\\x7f\"}\n"), "worker.env.A"));
}

TEST_CASE("checkpoint.file_mode: 0600 by default, 0640 read back through spec.yaml, modes with others' write or exec refused") {
  LoadResult plain = parse("version: 1\n" + kWorker);
  REQUIRE(plain.spec.has_value());
  CHECK(plain.spec->checkpoint.file_mode == 0600);
  for (const std::string& written : {std::string("\"0640\""), std::string("0640"), std::string("'640'")}) {
    CAPTURE(written);
    LoadResult group = parse("version: 1\n" + kWorker + "checkpoint: {file_mode: " + written + "}\n");
    REQUIRE(group.spec.has_value());
    CHECK(group.spec->checkpoint.file_mode == 0640);
    LoadResult again = parse_job_spec(to_yaml(*group.spec), "spec.yaml", ".", {});
    REQUIRE(again.spec.has_value());
    CHECK(again.spec->checkpoint.file_mode == 0640);
  }
  for (std::string bad : {"0777", "0400", "0646", "0x1a", "rw-r-----", "06400"}) {
    CAPTURE(bad);
    CHECK(contains(only_error("version: 1\n" + kWorker + "checkpoint: {file_mode: \"" + bad + "\"}\n"),
                   "job.yaml:4:25: checkpoint.file_mode: '" + bad + "' is not a file mode dtrain writes checkpoints with"));
  }
}

TEST_CASE("worker.pool: bad counts, module names and conflicts name the key and the fix") {
  const std::string command = "worker:\n  command: [python3, train.py]\n";
  CHECK(only_error("version: 1\n" + command + "  pool: {per_host: 65}\n") ==
        "job.yaml:4:20: worker.pool.per_host: expected a whole number from 0 to 64, got '65'");
  CHECK(only_error("version: 1\n" + command + "  pool: {per_host: 2, imports: [torch, 'numpy as np']}\n") ==
        "job.yaml:4:32: worker.pool.imports: 'numpy as np' is not a module name; write names as `import` takes "
        "them: [torch, numpy]");
  CHECK(only_error("version: 1\n" + command + "  pool: {per_hots: 2}\n") ==
        "job.yaml:4:10: worker.pool.per_hots: unknown key 'per_hots'; did you mean 'per_host'?");
  CHECK(contains(only_error("version: 1\n" + command + "  instrument: off\n  pool: {per_host: 2}\n"),
                 "worker.pool: the pool waits in dtrain's bootstrap, which `worker.instrument: off` turns off"));
  CHECK(contains(only_error("version: 1\n" + command + "  pool: {per_host: 2}\nelastic: {standby_per_host: 1}\n"),
                 "elastic.standby_per_host: cannot be used with worker.pool"));
}

TEST_CASE("worker.pool: per_host and imports are read, imports default to torch") {
  LoadResult result = parse("version: 1\nworker:\n  command: [python3, train.py]\n  pool: {per_host: 4}\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  CHECK(result.spec->worker.pool_per_host == 4);
  CHECK(result.spec->worker.pool_imports == std::vector<std::string>{"torch"});
  result = parse("version: 1\nworker:\n  command: [python3, train.py]\n  pool: {per_host: 1, imports: [torch, numpy.linalg]}\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  CHECK(result.spec->worker.pool_imports == std::vector<std::string>{"torch", "numpy.linalg"});
}

TEST_CASE("worker.pool round-trips through spec.yaml") {
  LoadResult result = parse("version: 1\nworker:\n  command: [python3, train.py]\n  pool: {per_host: 3, imports: [torch, numpy]}\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  std::string yaml = to_yaml(*result.spec);
  INFO(yaml);
  LoadResult again = parse_job_spec(yaml, "job.yaml", ".");
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->worker == result.spec->worker);
  CHECK(*again.spec == *result.spec);
}
