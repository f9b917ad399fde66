// The job spec: defaults, host forms, files next to the spec, overrides, and the resolved
// round trip.

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

const char* kMinimal = "version: 1\nworker:\n  command: [python3, train.py]\n";

JobSpec load_ok(const std::string& text, const std::vector<Override>& overrides = {}) {
  LoadResult result = parse_job_spec(text, "job.yaml", ".", overrides);
  REQUIRE_MESSAGE(result.ok(), result.message());
  return *result.spec;
}

Override set(const char* text) {
  auto parsed = parse_override(text);
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  return *parsed;
}

std::vector<std::string> names(const std::vector<HostEntry>& hosts) {
  std::vector<std::string> out;
  for (const HostEntry& host : hosts) out.push_back(host.name);
  return out;
}

}  // namespace

TEST_CASE("a minimal spec gets the documented defaults and the embedded localhost") {
  JobSpec spec = load_ok(kMinimal);
  REQUIRE(spec.hosts.size() == 1);
  CHECK(spec.hosts[0].name == "localhost");
  CHECK(spec.hosts[0].slots == 1);
  CHECK(spec.hosts[0].is_local());
  CHECK(spec.spares.empty());
  CHECK(spec.worker.command == std::vector<std::string>{"python3", "train.py"});
  CHECK(spec.worker.workdir.empty());
  CHECK(spec.worker.backend == Backend::auto_select);
  CHECK(spec.ssh.port == 22);
  CHECK(spec.ssh.host_key_policy == HostKeyPolicy::strict);
  CHECK(spec.ssh.connect_timeout == Millis(10'000));
  CHECK(spec.ssh.max_parallel == 64);
  CHECK(spec.parallelism.tensor == 1);
  CHECK(spec.parallelism.data == 0);
  CHECK(spec.heartbeat.interval == Millis(1'000));
  CHECK(spec.heartbeat.timeout == Millis(10'000));
  CHECK(spec.heartbeat.hang_timeout_auto());  // the default: set from the observed step time
  CHECK(spec.heartbeat.initial_hang_timeout() == Millis(60'000));
  CHECK(spec.elastic.progress_window == Millis(0));  // auto
  CHECK(spec.elastic.exclude_after == 2);
  CHECK(spec.checkpoint.keep == 3);
  CHECK(spec.stop_grace == Millis(10'000));
  CHECK(spec.source_path == "job.yaml");
}

TEST_CASE("heartbeat.hang_timeout and elastic.progress_window: auto, written back as auto") {
  JobSpec spec = load_ok(std::string(kMinimal) + "heartbeat: {hang_timeout: auto, timeout: 20s}\nelastic: {progress_window: auto}\n");
  CHECK(spec.heartbeat.hang_timeout_auto());
  CHECK(spec.heartbeat.initial_hang_timeout() == Millis(120'000));  // 6 x timeout, when longer than 1 minute
  CHECK(spec.heartbeat.checkpoint_hang_timeout() == Millis(600'000));
  std::string yaml = to_yaml(spec);
  CHECK(yaml.find("hang_timeout: auto") != std::string::npos);
  CHECK(yaml.find("progress_window: auto") != std::string::npos);
  JobSpec again = load_ok(yaml);
  CHECK(again.heartbeat == spec.heartbeat);
  CHECK(again.elastic == spec.elastic);
  JobSpec overridden = load_ok(std::string(kMinimal) + "heartbeat: {hang_timeout: 90s}\n", {set("heartbeat.hang_timeout=auto")});
  CHECK(overridden.heartbeat.hang_timeout_auto());
}

TEST_CASE("slots_per_host fills the embedded localhost and hosts without their own count") {
  JobSpec spec = load_ok(std::string(kMinimal) + "slots_per_host: 4\n");
  CHECK(spec.hosts[0].slots == 4);
  spec = load_ok(std::string(kMinimal) + "slots_per_host: 2\nhosts:\n  - gpu01\n  - {name: gpu02, slots: 8}\n");
  CHECK(spec.hosts[0].slots == 2);
  CHECK(spec.hosts[1].slots == 8);
}

TEST_CASE("hosts: hostlists, user@host:port, slots=N strings and mappings") {
  JobSpec spec = load_ok(std::string(kMinimal) +
                         "hosts:\n"
                         "  - gpu[01-02]\n"
                         "  - alice@gpu[03-04]:2222\n"
                         "  - gpu05 slots=3\n"
                         "  - {name: \"gpu[06-07]\", user: bob, port: 2200, slots: 8}\n"
                         "  - {name: gpu08, only_slots: [1, 3]}\n"
                         "  - \"::1\"\n");
  CHECK(names(spec.hosts) ==
        std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu06", "gpu07", "gpu08", "::1"});
  CHECK(spec.hosts[0].user.empty());
  CHECK(spec.hosts[0].port == 0);
  CHECK(spec.hosts[2].user == "alice");
  CHECK(spec.hosts[3].port == 2222);
  CHECK(spec.hosts[4].slots == 3);
  CHECK(spec.hosts[6].user == "bob");
  CHECK(spec.hosts[6].port == 2200);
  CHECK(spec.hosts[6].slots == 8);
  CHECK(spec.hosts[7].only_slots == std::vector<int>{1, 3});
  CHECK(spec.hosts[7].slots == 2);
  CHECK(spec.hosts[8].is_local());
}

TEST_CASE("hosts may be one hostlist string, and comma lists split outside brackets") {
  JobSpec spec = load_ok(std::string(kMinimal) + "hosts: a,node[1-2,4]\n");
  CHECK(names(spec.hosts) == std::vector<std::string>{"a", "node1", "node2", "node4"});
}

TEST_CASE("spares are marked and kept apart from hosts") {
  JobSpec spec = load_ok(std::string(kMinimal) + "hosts: [a, b]\nspares:\n  - gpu[1-2]\n");
  CHECK(names(spec.hosts) == std::vector<std::string>{"a", "b"});
  CHECK(names(spec.spares) == std::vector<std::string>{"gpu1", "gpu2"});
  CHECK(spec.spares[0].spare);
  CHECK(spec.spares[0].slots == 1);
  CHECK_FALSE(spec.hosts[0].spare);
}

TEST_CASE("include and exclude filter the hosts of the spec") {
  JobSpec spec = load_ok(std::string(kMinimal) + "slots_per_host: 4\nhosts: [\"worker-[0-2]\"]\ninclude: worker-0@worker-1:0,2\n");
  CHECK(names(spec.hosts) == std::vector<std::string>{"worker-0", "worker-1"});
  CHECK(spec.hosts[1].only_slots == std::vector<int>{0, 2});
  spec = load_ok(std::string(kMinimal) + "hosts: [\"worker-[0-2]\"]\nexclude: worker-1\n");
  CHECK(names(spec.hosts) == std::vector<std::string>{"worker-0", "worker-2"});
}

TEST_CASE("hostfile and env_file are read relative to the spec file") {
  TempDir dir;
  std::filesystem::create_directory(dir.path + "/conf");
  dir.write("conf/hostfile", "# cluster\nworker-1 slots=4\nworker-2\n");
  dir.write("conf/train.env", "# settings\nNCCL_DEBUG=WARN\nexport LR=0.1\nSHARED=from-file\n");
  std::string spec_path = dir.write("conf/job.yaml",
                                    "version: 1\nhostfile: hostfile\nslots_per_host: 2\n"
                                    "worker:\n  command: [python3, train.py]\n  env_file: train.env\n"
                                    "  env: {SHARED: from-spec, EXTRA: \"x y\"}\n");
  LoadResult result = load_job_spec(spec_path);
  REQUIRE_MESSAGE(result.ok(), result.message());
  const JobSpec& spec = *result.spec;
  CHECK(names(spec.hosts) == std::vector<std::string>{"worker-1", "worker-2"});
  CHECK(spec.hosts[0].slots == 4);
  CHECK(spec.hosts[1].slots == 2);
  CHECK(spec.worker.env.at("NCCL_DEBUG") == "WARN");
  CHECK(spec.worker.env.at("LR") == "0.1");
  CHECK(spec.worker.env.at("SHARED") == "from-spec");  // env wins over env_file
  CHECK(spec.worker.env.at("EXTRA") == "x y");
  CHECK(spec.worker.env_file == dir.path + "/conf/train.env");
  CHECK(spec.source_path == spec_path);
}

TEST_CASE("every section's keys are read") {
  JobSpec spec = load_ok(
      "version: 1\nname: bert-large\ntenant: team-a\n"
      "ssh: {user: train, port: 2222, identity: ~/.ssh/id_ed25519, known_hosts: /etc/kh,\n"
      "      host_key_policy: accept-new, connect_timeout: 2s, max_parallel: 8, remote_dtrain: /opt/dtrain}\n"
      "worker: {command: [dtrain-train, --steps, \"100\"], workdir: /srv/job, backend: gloo}\n"
      "parallelism: {tensor: 2, pipeline: 2, data: 3}\n"
      "batch: {global: 96, micro: 4}\n"
      "elastic: {min_hosts: 1, max_restarts: 5, restart_window: 30m, exclude_after: 3}\n"
      "heartbeat: {interval: 500ms, timeout: 5s, hang_timeout: 2m}\n"
      "checkpoint: {dir: /ckpt, interval_steps: 50, keep: 2}\n"
      "stop_grace: 1.5s\n");
  CHECK(spec.name == "bert-large");
  CHECK(spec.tenant == "team-a");
  CHECK(spec.ssh.user == "train");
  CHECK(spec.ssh.port == 2222);
  CHECK(spec.ssh.identity == std::vector<std::string>{"~/.ssh/id_ed25519"});
  CHECK(spec.ssh.known_hosts == "/etc/kh");
  CHECK(spec.ssh.host_key_policy == HostKeyPolicy::accept_new);
  CHECK(spec.ssh.connect_timeout == Millis(2'000));
  CHECK(spec.ssh.max_parallel == 8);
  CHECK(spec.ssh.remote_dtrain == "/opt/dtrain");
  CHECK(spec.worker.command == std::vector<std::string>{"dtrain-train", "--steps", "100"});
  CHECK(spec.worker.workdir == "/srv/job");
  CHECK(spec.worker.backend == Backend::gloo);
  CHECK(spec.parallelism.tensor == 2);
  CHECK(spec.parallelism.pipeline == 2);
  CHECK(spec.parallelism.data == 3);
  CHECK(spec.batch.global == 96);
  CHECK(spec.batch.micro == 4);
  CHECK(spec.elastic.min_hosts == 1);
  CHECK(spec.elastic.max_restarts == 5);
  CHECK(spec.elastic.restart_window == Millis(1'800'000));
  CHECK(spec.elastic.exclude_after == 3);
  CHECK(spec.heartbeat.interval == Millis(500));
  CHECK(spec.heartbeat.timeout == Millis(5'000));
  CHECK(spec.heartbeat.hang_timeout == Millis(120'000));
  CHECK(spec.checkpoint.dir == "/ckpt");
  CHECK(spec.checkpoint.interval_steps == 50);
  CHECK(spec.checkpoint.keep == 2);
  CHECK(spec.stop_grace == Millis(1'500));
}

TEST_CASE("argv items reach the spec unchanged: spaces, quotes, $()") {
  JobSpec spec = load_ok("version: 1\nworker:\n  command: [sh, -c, 'echo \"$(hostname)\" it''s', \"a  b\"]\n");
  CHECK(spec.worker.command ==
        std::vector<std::string>{"sh", "-c", "echo \"$(hostname)\" it's", "a  b"});
}

TEST_CASE("overrides: values are YAML scalars and lists, sections are created") {
  JobSpec spec = load_ok("version: 1\nworker: {command: [x]}\nparallelism: {data: 2}\n",
                         {set("parallelism.data=auto"), set("elastic.max_restarts=3"), set("hosts=[a,b]"),
                          set("heartbeat.hang_timeout=5m"), set("name=override-name"), set("ssh.identity=[k1, k2]")});
  CHECK(spec.parallelism.data == 0);
  CHECK(spec.elastic.max_restarts == 3);
  CHECK(names(spec.hosts) == std::vector<std::string>{"a", "b"});
  CHECK(spec.heartbeat.hang_timeout == Millis(300'000));
  CHECK(spec.name == "override-name");
  CHECK(spec.ssh.identity == std::vector<std::string>{"k1", "k2"});
  spec = load_ok(kMinimal, {set("hosts=gpu[01-03]"), set("worker.command=[python3, other.py]")});
  CHECK(names(spec.hosts) == std::vector<std::string>{"gpu01", "gpu02", "gpu03"});
  CHECK(spec.worker.command[1] == "other.py");
}

TEST_CASE("parse_override splits at the first '=' and refuses what is not key=value") {
  Override parsed = set("worker.env.X=a=b");
  CHECK(parsed.key == "worker.env.X");
  CHECK(parsed.value == "a=b");
  CHECK(set("checkpoint.dir=").value.empty());
  auto missing = parse_override("elastic.max_restarts");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("has no '='") != std::string::npos);
  CHECK_FALSE(parse_override("=3").ok());
  CHECK_FALSE(parse_override("a..b=3").ok());
}

TEST_CASE("to_yaml writes a resolved spec that parses back to an equal JobSpec") {
  TempDir dir;
  dir.write("train.env", "FROM_FILE=1\n");
  std::string path = dir.write("job.yaml",
                               "version: 1\nname: rt\nslots_per_host: 4\n"
                               "hosts: [\"alice@gpu[01-03]:2222\", {name: gpu04, slots: 2}]\n"
                               "include: gpu01@gpu02@gpu04:1\n"
                               "spares: [spare1]\n"
                               "ssh: {identity: [k1, \"~\"], host_key_policy: insecure, connect_timeout: 1234ms}\n"
                               "worker: {command: [python3, \"a b\", \"null\", \"\", \"~\"], env: {A: \"yes\", B: \"\"},\n"
                               "         env_file: train.env, backend: nccl}\n"
                               "parallelism: {tensor: 2, data: auto}\n"
                               "batch: {global: 64}\n"
                               "elastic: {min_hosts: 2, max_restarts: 4, restart_window: 90s}\n"
                               "heartbeat: {interval: 250ms, timeout: 3s, hang_timeout: 1h, checkpoint_timeout: 2h}\n"
                               "checkpoint: {dir: ckpt, interval_steps: 10}\n"
                               "stop_grace: 0ms\n");
  LoadResult first = load_job_spec(path);
  REQUIRE_MESSAGE(first.ok(), first.message());
  std::string yaml = to_yaml(*first.spec);
  LoadResult second = parse_job_spec(yaml, "spec.yaml", "/nonexistent");
  INFO(yaml);
  REQUIRE_MESSAGE(second.ok(), second.message());
  JobSpec expected = *first.spec;
  // The env_file is kept as its absolute path and names, and read again.
  CHECK(yaml.find("FROM_FILE: ") == std::string::npos);
  CHECK(yaml.find("env_file_names: [\"FROM_FILE\"]") != std::string::npos);
  expected.source_path = "spec.yaml";
  CHECK(expected.hosts == second.spec->hosts);
  CHECK(expected.spares == second.spec->spares);
  CHECK(expected.ssh == second.spec->ssh);
  CHECK(expected.worker == second.spec->worker);
  CHECK(expected == *second.spec);
  CHECK(second.spec->hosts[2].only_slots == std::vector<int>{1});
  CHECK(second.spec->heartbeat.checkpoint_timeout == Millis(7200000));
  CHECK(second.spec->worker.env.at("FROM_FILE") == "1");
  CHECK(to_yaml(*second.spec) == yaml);
}

TEST_CASE("to_yaml keeps no secret: worker.env secrets become pass_env names, the env_file its path and names") {
  TempDir dir;
  dir.write("secrets.env", "HF_TOKEN=hf_from_the_file\nDATASET=imagenet\n");
  std::string path = dir.write("job.yaml",
                               "version: 1\nworker:\n  command: [python3, train.py]\n"
                               "  env: {WANDB_API_KEY: \"wandb-in-the-spec\", db_Password: \"pw-in-the-spec\", LR: \"0.1\",\n"
                               "        TOKENIZERS_PARALLELISM: \"false\"}\n"
                               "  env_file: secrets.env\n");
  LoadResult first = load_job_spec(path);
  REQUIRE_MESSAGE(first.ok(), first.message());
  CHECK(first.spec->worker.env.at("HF_TOKEN") == "hf_from_the_file");
  CHECK(first.spec->worker.env_file_names == std::vector<std::string>{"DATASET", "HF_TOKEN"});
  std::string yaml = to_yaml(*first.spec);
  INFO(yaml);
  for (const char* secret : {"hf_from_the_file", "wandb-in-the-spec", "pw-in-the-spec", "imagenet"}) {
    CHECK_MESSAGE(yaml.find(secret) == std::string::npos, secret);
  }
  CHECK(yaml.find("pass_env: [\"WANDB_API_KEY\", \"db_Password\"]") != std::string::npos);
  CHECK(yaml.find("LR: \"0.1\"") != std::string::npos);
  CHECK(yaml.find("TOKENIZERS_PARALLELISM: \"false\"") != std::string::npos);  // looks secret, is not

  // For a resume: the secrets exported again, the file read again: the same spec.
  ::setenv("WANDB_API_KEY", "wandb-in-the-spec", 1);
  ::setenv("db_Password", "pw-in-the-spec", 1);
  LoadResult resumed = parse_job_spec(yaml, "spec.yaml", "/nonexistent");
  REQUIRE_MESSAGE(resumed.ok(), resumed.message());
  CHECK(resumed.spec->worker.env == first.spec->worker.env);
  CHECK(to_yaml(*resumed.spec) == yaml);
  CHECK(resumed.warnings.empty());

  // Not exported: refused, naming the variable and the fix; the value is never quoted.
  ::unsetenv("WANDB_API_KEY");
  LoadResult missing = parse_job_spec(yaml, "spec.yaml", "/nonexistent");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("worker.pass_env: WANDB_API_KEY is not set in dtrain's environment") != std::string::npos);
  // Read for its hosts only (dtrain stop, status): neither the file nor the variables needed.
  std::filesystem::remove(dir.path + "/secrets.env");
  LoadResult names_only = parse_job_spec(yaml, "spec.yaml", "/nonexistent", {}, EnvValues::names_only);
  REQUIRE_MESSAGE(names_only.ok(), names_only.message());
  CHECK(names_only.spec->worker.env ==
        std::map<std::string, std::string>{{"LR", "0.1"}, {"TOKENIZERS_PARALLELISM", "false"}});
  CHECK(to_yaml(*names_only.spec) == yaml);
  ::unsetenv("db_Password");

  // The file back with other names: loads, with a warning that says which.
  dir.write("secrets.env", "HF_TOKEN=hf_from_the_file\nEXTRA=1\n");
  ::setenv("WANDB_API_KEY", "wandb-in-the-spec", 1);
  ::setenv("db_Password", "pw-in-the-spec", 1);
  LoadResult changed = parse_job_spec(yaml, "spec.yaml", "/nonexistent");
  REQUIRE_MESSAGE(changed.ok(), changed.message());
  REQUIRE(changed.warnings.size() == 1);
  CHECK(changed.warnings[0].message.find("(new: EXTRA; gone: DATASET)") != std::string::npos);
  ::unsetenv("WANDB_API_KEY");
  ::unsetenv("db_Password");
}

TEST_CASE("to_yaml of the embedded default round-trips too") {
  JobSpec spec = load_ok(kMinimal);
  LoadResult again = parse_job_spec(to_yaml(spec), "job.yaml", ".");
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(*again.spec == spec);
}
