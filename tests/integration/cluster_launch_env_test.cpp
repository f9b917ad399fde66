// The launch environment on the namespace cluster (issue 11): a job that mixes the launch node
// ("localhost") with a remote host gives every rank one MASTER_ADDR that the remote ranks really
// reach rank 0 at (never loopback, also when the launch node's own name maps to 127.0.1.1 as on
// Debian); and when rank 0's host cannot reserve MASTER_PORT, `dtrain submit` fails at once with
// the agent's error as root cause instead of waiting out the launch deadline, also when it may
// restart. After each run no process of it remains on any host.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>


#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

// A torchrun-style rendezvous without torch: rank 0 listens on MASTER_PORT on every address (as
// torch's TCPStore does) and every other rank connects to MASTER_ADDR:MASTER_PORT, says who it is
// and waits for rank 0's reply. Rank 0 lists whom it heard from, and from which address, so the
// test sees the connection from both ends. Connection refused is retried: rank 0 may start later.
const char* kRendezvousScript = R"(import os, socket, sys, time
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
host = socket.gethostname()
print(f"ENV RANK={rank} HOST={host} MASTER_ADDR={master[0]} MASTER_PORT={master[1]}", flush=True)
if rank == 0:
    server = socket.create_server(("0.0.0.0", master[1]))
    server.settimeout(30)
    for _ in range(world - 1):
        peer, (peer_address, _) = server.accept()
        with peer:
            said = peer.makefile().readline().strip()
            peer.sendall(b"welcome\n")
        print(f"JOINED {said} FROM {peer_address}", flush=True)
    sys.exit(0)
deadline = time.monotonic() + 20
while True:
    try:
        peer = socket.create_connection(master, timeout=10)
        break
    except OSError as failure:
        if time.monotonic() > deadline:
            sys.exit(f"cannot reach rank 0 at {master}: {failure}")
        time.sleep(0.1)
with peer:
    peer.sendall(f"rank={rank} host={host}\n".encode())
    print(f"REPLY {peer.makefile().readline().strip()}", flush=True)
)";

// Holds every port from argv[1] to argv[2] (listening, as a busy server would) until killed.
const char* kPortHolderScript = R"(import signal, socket, sys
held = []
for port in range(int(sys.argv[1]), int(sys.argv[2]) + 1):
    holder = socket.socket()
    holder.bind(("0.0.0.0", port))
    holder.listen()
    held.append(holder)
print("holding", flush=True)
signal.pause()
)";

// What bind(0) says on a host: "free <port>" or the error (the agent's reserve_port does the same).
const char* kBindAnyPortProbe =
    "import socket\n"
    "probe = socket.socket()\n"
    "try:\n"
    "    probe.bind(('0.0.0.0', 0)); print('free', probe.getsockname()[1])\n"
    "except OSError as failure:\n"
    "    print('bind failed:', failure)\n";

const char* kSystemPython = "/usr/bin/python3";

/// `job` with the launch node listed first, as "localhost": rank 0 runs where dtrain runs (the
/// control namespace) and the cluster hosts after it are reached over SSH.
std::string spec_with_localhost_first(const TestCluster& cluster, const ClusterSpec& job) {
  std::string yaml = cluster_spec_yaml(cluster, job);
  const std::string hosts_key = "hosts:\n";
  yaml.replace(yaml.find(hosts_key), hosts_key.size(), hosts_key + "  - localhost\n");
  return yaml;
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

/// Runs the rendezvous script as 2 slots on the launch node + 2 on cluster host 1 and checks
/// that every rank got `expected_master_addr`, and that both remote ranks (and local rank 1)
/// reached rank 0 there: rank 0 heard each of them, from the host's own address.
void check_rendezvous_from_remote_host(const TestCluster& cluster, const std::string& tag,
                                       const std::string& expected_master_addr) {
  ClusterJob job(cluster, tag);
  std::string script = job.dir() + "/rendezvous.py";  // under the build tree: every host sees it
  write_text(script, kRendezvousScript);
  ClusterSpec spec;
  spec.name = tag;
  spec.hosts = {1};
  spec.command = std::string("[") + kSystemPython + ", " + script + "]";
  write_text(job.write_spec(spec), spec_with_localhost_first(cluster, spec));
  REQUIRE(job.run());
  INFO(job.err());
  std::string logs;
  for (int rank = 0; rank < 4; ++rank) logs += "rank " + std::to_string(rank) + ": " + job.rank_log(rank);
  INFO(logs);
  CHECK(job.exit_code() == 0);

  auto spawned = job.events("generation.spawned");
  REQUIRE(spawned.size() == 1);
  std::string master_addr = spawned[0].value("master_addr", "");
  CHECK(master_addr == expected_master_addr);
  CHECK(!is_loopback(master_addr));
  // Every rank, wherever it ran, got the same MASTER_ADDR and MASTER_PORT.
  const std::string launch_node = cluster.control_namespace();  // its hostname too
  const ClusterHost& remote = cluster.host(1);
  for (int rank = 0; rank < 4; ++rank) {
    std::string expected_env = "ENV RANK=" + std::to_string(rank) + " HOST=" + (rank < 2 ? launch_node : remote.name) +
                               " MASTER_ADDR=" + master_addr + " MASTER_PORT=" +
                               std::to_string(spawned[0].value("master_port", 0)) + "\n";
    INFO("rank " << rank << " should print " << expected_env);
    CHECK(job.rank_log(rank).find(expected_env) != std::string::npos);
  }

  std::string rank0_log = job.rank_log(0);
  CHECK(rank0_log.find("JOINED rank=1 host=" + launch_node + " FROM ") != std::string::npos);
  for (int rank : {2, 3}) {
    CHECK(rank0_log.find("JOINED rank=" + std::to_string(rank) + " host=" + remote.name + " FROM " +
                         remote.ip + "\n") != std::string::npos);
  }
  for (int rank = 1; rank < 4; ++rank) CHECK(job.rank_log(rank).find("REPLY welcome") != std::string::npos);
  check_nothing_left(cluster, job);
}

/// A process of the test's own on cluster host `number`, started through `testcluster.sh exec`,
/// which execs all the way down: the pid forked here is the command itself, and end() (or scope
/// exit) kills and reaps exactly that pid.
class HostProcess {
 public:
  HostProcess(const TestCluster& cluster, int number, const std::vector<std::string>& command) {
    int output[2];
    if (::pipe2(output, O_CLOEXEC) != 0) return;
    std::vector<std::string> argv{std::string(DTRAIN_SOURCE_DIR) + "/scripts/testcluster.sh", "exec",
                                  std::to_string(number)};
    argv.insert(argv.end(), command.begin(), command.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setenv("DTRAIN_TESTCLUSTER_PREFIX", cluster.prefix().c_str(), 1);
      ::dup2(output[1], 1);
      std::vector<char*> raw;
      for (std::string& arg : argv) raw.push_back(arg.data());
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      _exit(127);
    }
    ::close(output[1]);
    output_ = output[0];
  }
  ~HostProcess() {
    end();
    if (output_ >= 0) ::close(output_);
  }
  HostProcess(const HostProcess&) = delete;
  HostProcess& operator=(const HostProcess&) = delete;

  /// The first line it printed ("" when it exited without one).
  std::string first_line() {
    std::string line;
    char c;
    while (output_ >= 0 && ::read(output_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }

  void end() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int output_ = -1;
};

/// Leaves host `number` of `cluster` unable to bind port 0: its namespace's ephemeral range is
/// narrowed to two ports, which a process of ours then holds. Only that host's network
/// namespace changes, and it goes with the cluster.
class EphemeralPortsExhausted {
 public:
  EphemeralPortsExhausted(const TestCluster& cluster, int number)
      : holder_(cluster, number, {kSystemPython, "-c", kPortHolderScript, kFirstPort, kLastPort}) {
    REQUIRE(holder_.first_line() == "holding");
    CommandOutput narrowed = cluster.exec(std::to_string(number), {"sysctl", "-w",
        std::string("net.ipv4.ip_local_port_range=") + kFirstPort + " " + kLastPort});
    REQUIRE_MESSAGE(narrowed.status == 0, narrowed.output);
    CommandOutput probe = cluster.exec(std::to_string(number), {kSystemPython, "-c", kBindAnyPortProbe});
    REQUIRE_MESSAGE(probe.output.find("Address already in use") != std::string::npos, probe.output);
  }

  /// Ends the holder, so that the "nothing left on any host" check sees only the run.
  void release() { holder_.end(); }

 private:
  static constexpr const char* kFirstPort = "45000";
  static constexpr const char* kLastPort = "45001";
  HostProcess holder_;
};

/// Checks the run failed on its own port reservation on `host`, not by a deadline: every
/// failure it detected is the agent's error naming the host and why, and no generation spawned.
void check_failed_on_port_reservation(ClusterJob& job, const std::string& host, int failures) {
  INFO(job.err());
  CHECK(job.exit_code() == 1);
  CHECK(job.err().find("cannot find a free TCP port") != std::string::npos);
  CHECK(job.err().find(host) != std::string::npos);

  auto detected = job.events("failure.detected");
  CHECK(detected.size() == static_cast<size_t>(failures));
  for (const auto& failure : detected) {
    INFO(failure.dump());
    CHECK(failure["kind"] == "agent.error");  // not launch.timeout: it did not wait for a deadline
    CHECK(failure["host"] == host);
    CHECK(failure["detail"].get<std::string>().find("port reservation failed on " + host) != std::string::npos);
    CHECK(failure["detail"].get<std::string>().find("cannot find a free TCP port") != std::string::npos);
  }
  auto agent_errors = job.events("agent.error");
  CHECK(agent_errors.size() == static_cast<size_t>(failures));
  for (const auto& error : agent_errors) CHECK(error["host"] == host);
  CHECK(job.events("generation.spawned").empty());

  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"), nullptr, false);
  INFO(state.dump());
  CHECK(state["state"] == "failed");
  CHECK(state["root_cause"]["kind"] == "agent.error");
  CHECK(state["root_cause"]["host"] == host);
  CHECK(state["root_cause"].dump().find("cannot find a free TCP port") != std::string::npos);

  auto finished = job.events("run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["exit_code"] == 1);
  CHECK(finished[0]["generations"] == failures);
  CHECK(finished[0]["restarts"] == failures - 1);
}

}  // namespace

TEST_CASE("localhost + a remote host: remote ranks reach rank 0 at the launch node's name - the trainer trains") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  // The control namespace's hostname resolves to its cluster address everywhere.
  check_rendezvous_from_remote_host(cluster, "mixed", cluster.control_namespace());

  // The reference trainer across both: Gloo pairs listen on the address that routes toward
  // MASTER_ADDR, so a loopback MASTER_ADDR could not connect rank 0 to the remote ranks.
  ClusterJob train(cluster, "mixtrain");
  ClusterSpec spec;
  spec.name = "mixtrain";
  spec.hosts = {1};
  spec.command = trainer_command(100);
  spec.extra = "batch: {global: 24, micro: 2}\n";
  write_text(train.write_spec(spec), spec_with_localhost_first(cluster, spec));
  REQUIRE(train.run());
  INFO(train.err());
  CHECK(train.exit_code() == 0);
  nlohmann::json plan = train.plan(0);
  REQUIRE(plan["ranks"].size() == 4);
  CHECK(plan["ranks"][0]["host"] == "localhost");
  CHECK(plan["ranks"][3]["host"] == cluster.host(1).name);
  std::string expected = final_line(train.rank_log(0));
  CHECK(expected.find("final step=100") != std::string::npos);
  for (int rank = 1; rank < 4; ++rank) CHECK(final_line(train.rank_log(rank)) == expected);
  CHECK(train.rank_log(0).find("world 4 (dp 4 x pp 1 x tp 1)") != std::string::npos);
  check_nothing_left(cluster, train);
}

TEST_CASE("launch node named 127.0.1.1 as on Debian: MASTER_ADDR is its SSH source address - remote ranks reach it") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  // Debian's /etc/hosts maps the machine's own name to 127.0.1.1. Every host of the cluster
  // bind-mounts this one file, so rewriting it in place (same inode) changes what every host
  // resolves the launch node's name to: a MASTER_ADDR by that name would send the remote ranks
  // to their own loopback.
  std::string hosts = read_text(cluster.hosts_file());
  std::string listed = cluster.value("DTRAIN_TESTCLUSTER_CONTROL_IP") + " " + cluster.control_namespace() + "\n";
  REQUIRE(hosts.find(listed) != std::string::npos);
  hosts.replace(hosts.find(listed), listed.size(), "127.0.1.1 " + cluster.control_namespace() + "\n");
  write_text(cluster.hosts_file(), hosts);
  CommandOutput resolved = cluster.exec("1", {"getent", "hosts", cluster.control_namespace()});
  REQUIRE_MESSAGE(resolved.output.find("127.0.1.1") != std::string::npos, resolved.output);

  check_rendezvous_from_remote_host(cluster, "debian", cluster.value("DTRAIN_TESTCLUSTER_CONTROL_IP"));
}

TEST_CASE("rank 0's host cannot reserve MASTER_PORT: submit fails at once with the agent's error - nothing left") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  const std::string rank0_host = cluster.host(1).name;
  EphemeralPortsExhausted exhausted(cluster, 1);

  ClusterSpec spec;
  spec.name = "noport";
  spec.hosts = {1, 2};
  spec.slots = 1;
  spec.command = "[/bin/sh, -c, 'exec sleep 60']";
  ClusterJob once(cluster, "noport");
  once.write_spec(spec);
  REQUIRE(once.run({}, 60000));
  check_failed_on_port_reservation(once, rank0_host, 1);
  CHECK(once.err().find("no restarts allowed") != std::string::npos);

  // With restarts allowed, each generation fails the same way until the budget is spent.
  ClusterJob restarting(cluster, "noportre");
  spec.name = "noportre";
  spec.extra = "elastic: {max_restarts: 2}\n";
  restarting.write_spec(spec);
  REQUIRE(restarting.run({}, 60000));
  check_failed_on_port_reservation(restarting, rank0_host, 3);
  CHECK(restarting.err().find("restart budget spent") != std::string::npos);

  exhausted.release();
  check_nothing_left(cluster, once);
  check_nothing_left(cluster, restarting);
}
