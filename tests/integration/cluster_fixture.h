#pragma once
// TestCluster: an RAII handle on scripts/testcluster.sh for integration tests. Brings a cluster
// of network-namespace hosts up with a prefix unique to this process (tests run in parallel
// under ctest) and always tears it down in the destructor. Where the machine cannot host one
// (not root, no `ip netns`, no sshd: the script exits 77), available() is false and tests skip:
//
//   dtrain::testing::TestCluster cluster(3);
//   DTRAIN_REQUIRE_CLUSTER(cluster);   // "skipped: ...", exit 77 (tests/skip.h)
//   dtrain::testing::InControlNamespace in_ctl(cluster);  // this process now sees the cluster
//
// Every host sees the source and build trees under test at their own paths (each host has a
// private /tmp and home, so a checkout under either would be invisible there otherwise):
// `up` is given both with --share.
//
// A test process killed before its destructor ran (a ctest timeout, a SIGKILL) leaves its
// namespaces behind: every fixture first tears down the clusters of test processes that are
// gone (prefix "t<pid><letter>" whose pid no longer exists).
//
// Header-only: every integration test executable may include it.

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/base/strings.h"
#include "tests/skip.h"

#ifndef DTRAIN_SOURCE_DIR
#error "cluster_fixture.h needs DTRAIN_SOURCE_DIR (integration tests get it from CMake)"
#endif
#ifndef DTRAIN_BINARY_DIR
#error "cluster_fixture.h needs DTRAIN_BINARY_DIR (integration tests get it from CMake)"
#endif

namespace dtrain::testing {

/// Exit status and combined stdout+stderr of a command.
struct CommandOutput {
  int status = -1;  ///< exit code; 128+N when killed by signal N
  std::string output;
};

/// Runs `argv` (no shell: each argument is quoted) with extra environment assignments, and
/// captures stdout and stderr.
inline CommandOutput run_command(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env = {}) {
  std::string line;
  for (const auto& [key, value] : env) line += key + "=" + shell_quote(value) + " ";
  if (!env.empty()) line = "env " + line;
  for (const std::string& argument : argv) line += shell_quote(argument) + " ";
  line += "2>&1 </dev/null";
  CommandOutput result;
  FILE* pipe = ::popen(line.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, count);
  int status = ::pclose(pipe);
  if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) result.status = 128 + WTERMSIG(status);
  return result;
}

/// One host of the cluster, as cluster.env describes it.
struct ClusterHost {
  std::string name;  ///< "t123a-h1": its hostname, its namespace, its name in known_hosts
  std::string ip;    ///< "10.77.0.11"
  std::string dir;   ///< state directory of this host (sshd config, log, home/, tmp/)
  std::string home() const { return dir + "/home"; }
};

class TestCluster {
 public:
  /// Brings up `host_count` hosts. Uses $DTRAIN_TESTCLUSTER_PREFIX when set, else a prefix
  /// unique to this process and fixture instance. `up_options`: more `up` options (--slurm).
  explicit TestCluster(int host_count, const std::vector<std::string>& up_options = {}) {
    if (const char* forced = std::getenv("DTRAIN_TESTCLUSTER_PREFIX"); forced && *forced) {
      prefix_ = forced;
    } else {
      static int instance = 0;
      prefix_ = "t" + std::to_string(::getpid()) + static_cast<char>('a' + (instance++ % 26));
    }
    if (::geteuid() != 0) {
      skip_reason_ = "the test cluster needs root (network namespaces); uid is " +
                     std::to_string(::geteuid());
      return;
    }
    reap_clusters_of_dead_tests();
    // The build tree may live outside the source tree (DTRAIN_BUILD_DIR): share both.
    std::vector<std::string> up_args{"up", std::to_string(host_count), "--share", DTRAIN_SOURCE_DIR,
                                     "--share", DTRAIN_BINARY_DIR};
    up_args.insert(up_args.end(), up_options.begin(), up_options.end());
    CommandOutput up = script(up_args);
    if (up.status == 77) {
      skip_reason_ = trim_copy(up.output);
      return;
    }
    brought_up_ = true;  // even a failed `up` may have left namespaces: always run `down`
    if (up.status != 0) {
      error_ = "testcluster.sh up " + std::to_string(host_count) + " failed (" +
               std::to_string(up.status) + "): " + up.output;
      return;
    }
    load_env();
  }

  ~TestCluster() {
    if (!brought_up_) return;
    keep_kube_requests();
    script({"down"});
  }
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  /// False when the machine cannot host a cluster: skip_reason() says why.
  bool available() const { return skip_reason_.empty(); }
  const std::string& skip_reason() const { return skip_reason_; }
  /// Non-empty when `up` failed on a machine that should be able to run it: a test failure.
  const std::string& error() const { return error_; }

  const std::string& prefix() const { return prefix_; }
  const std::vector<ClusterHost>& hosts() const { return hosts_; }
  /// 1-based, as the script numbers hosts.
  const ClusterHost& host(int number) const { return hosts_.at(number - 1); }
  std::string value(const std::string& key) const {
    auto it = env_.find(key);
    return it == env_.end() ? std::string() : it->second;
  }
  std::string state_dir() const { return value("DTRAIN_TESTCLUSTER_STATE"); }
  std::string user() const { return value("DTRAIN_TESTCLUSTER_USER"); }
  std::string key_path() const { return value("DTRAIN_TESTCLUSTER_KEY"); }
  std::string known_hosts_path() const { return value("DTRAIN_TESTCLUSTER_KNOWN_HOSTS"); }
  std::string ssh_config_path() const { return value("DTRAIN_TESTCLUSTER_SSH_CONFIG"); }
  std::string hosts_file() const { return value("DTRAIN_TESTCLUSTER_HOSTS_FILE"); }
  std::string control_namespace() const { return value("DTRAIN_TESTCLUSTER_CONTROL_NS"); }
  /// With `up N --kubernetes` (kubernetes_options()): the emulated API server's kubeconfig, its
  /// namespace, and the file that records every request it served (tests/k8s/README.md).
  std::string kubeconfig() const { return value("DTRAIN_TESTCLUSTER_KUBECONFIG"); }
  std::string kube_namespace() const { return value("DTRAIN_TESTCLUSTER_KUBE_NAMESPACE"); }
  std::string kube_requests() const { return value("DTRAIN_TESTCLUSTER_KUBE_REQUESTS"); }

  /// `up` options for a cluster with the emulated Kubernetes API server and node emulator.
  static std::vector<std::string> kubernetes_options() { return {"--kubernetes"}; }
  /// The same where the JobSet CRD is installed: the API server stores and runs JobSets.
  static std::vector<std::string> kubernetes_jobset_options() { return {"--kubernetes", "--kube-jobset-crd"}; }
  /// Why a Kubernetes cluster cannot be brought up here ("" when it can be tried): the emulator
  /// (tests/k8s/apiserver.py) is not in this tree, or no kubectl is installed. Ask before
  /// constructing the cluster, so that a skip leaves nothing behind.
  static std::string kubernetes_skip_reason() {
    if (::access((std::string(DTRAIN_SOURCE_DIR) + "/tests/k8s/apiserver.py").c_str(), R_OK) != 0) {
      return "the emulated Kubernetes API server (tests/k8s/apiserver.py) is not in this tree";
    }
    if (run_command({"sh", "-c", "command -v kubectl"}).status != 0) {
      return "no kubectl in PATH (scripts/setup.sh installs it)";
    }
    // kubectl execs over WebSocket from 1.30 on; the emulator speaks no SPDY (Debian's
    // kubernetes-client is 1.20). "minor": "32+" in kubectl's own JSON.
    CommandOutput version = run_command({"sh", "-c",
                                         "kubectl version --client -o json | sed -n 's/.*\"minor\": *\"\\([0-9]*\\).*/\\1/p'"});
    int minor = 0;
    try {
      minor = std::stoi(version.output);
    } catch (const std::exception&) {
      return "cannot read kubectl's version (`kubectl version --client -o json`)";
    }
    if (minor < 30) return "kubectl 1." + std::to_string(minor) + " execs over SPDY only; the emulator needs 1.30 or newer";
    return "";
  }

  /// kubectl's discovery cache for this cluster (see kubectl()).
  std::string kube_cache_dir() const { return state_dir() + "/kube/kubectl-cache"; }

  /// `kubectl --kubeconfig K -n NS ARGS...` in the control namespace, where dtrain runs.
  CommandOutput kubectl(const std::vector<std::string>& args) const {
    // A cache of this cluster's own: every test cluster's API server is at 10.77.0.2:6443, and
    // kubectl's default cache (~/.kube/cache) would serve one cluster's discovery to the next.
    std::vector<std::string> argv{"kubectl", "--kubeconfig", kubeconfig(), "--cache-dir", kube_cache_dir(),
                                  "-n", kube_namespace()};
    argv.insert(argv.end(), args.begin(), args.end());
    return exec("ctl", argv);
  }

  /// `testcluster.sh ARGS...` for this cluster.
  CommandOutput script(const std::vector<std::string>& args) const { return script_for(prefix_, args); }

  /// `testcluster.sh ARGS...` for the cluster of `prefix`.
  static CommandOutput script_for(const std::string& prefix, const std::vector<std::string>& args) {
    std::vector<std::string> argv{std::string(DTRAIN_SOURCE_DIR) + "/scripts/testcluster.sh"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, {{"DTRAIN_TESTCLUSTER_PREFIX", prefix}});
  }

  /// Runs `down` for every cluster a test fixture made ("t<pid><letter>-...") whose process is
  /// gone. A pid that exists again (reused) is left alone: it might be a live test's.
  static void reap_clusters_of_dead_tests() {
    CommandOutput listed = run_command({"ip", "netns", "list"});
    std::set<std::string> dead_prefixes;
    std::istringstream lines(listed.output);
    for (std::string line; std::getline(lines, line);) {
      std::string name = line.substr(0, line.find(' '));
      size_t dash = name.find('-');
      if (name.size() < 3 || name[0] != 't' || dash == std::string::npos || dash < 3) continue;
      std::string digits = name.substr(1, dash - 2);
      char letter = name[dash - 1];
      if (letter < 'a' || letter > 'z' || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      pid_t owner = static_cast<pid_t>(std::strtol(digits.c_str(), nullptr, 10));
      if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) dead_prefixes.insert(name.substr(0, dash));
    }
    for (const std::string& prefix : dead_prefixes) {
      CommandOutput down = script_for(prefix, {"down"});
      std::fprintf(stderr, "testcluster: tore down %s, left by a test process that is gone (%d)\n", prefix.c_str(),
                   down.status);
    }
  }
  CommandOutput partition(int number) const { return script({"partition", std::to_string(number)}); }
  CommandOutput heal(int number) const { return script({"heal", std::to_string(number)}); }
  CommandOutput kill(int number) const { return script({"kill", std::to_string(number)}); }
  CommandOutput restart(int number) const { return script({"restart", std::to_string(number)}); }
  CommandOutput rekey(int number) const { return script({"rekey", std::to_string(number)}); }

  /// Runs argv as on host `where` ("ctl", "1", "h1", a full name): its network, hostname and
  /// private home//tmp.
  CommandOutput exec(const std::string& where, const std::vector<std::string>& argv) const {
    std::vector<std::string> args{"exec", where};
    args.insert(args.end(), argv.begin(), argv.end());
    return script(args);
  }

  /// OpenSSH from the control namespace to host `number` (BatchMode, the harness's key).
  CommandOutput ssh(int number, const std::string& remote_command, int connect_timeout_s = 5) const {
    return exec("ctl", {"ssh", "-F", ssh_config_path(), "-o",
                        "ConnectTimeout=" + std::to_string(connect_timeout_s), host(number).name,
                        remote_command});
  }

  /// Makes host `hidden` reachable only through other hosts: an nft table in its own namespace
  /// drops every packet from the control namespace. Returns an ssh_config for OpenSSH (the
  /// cluster's, then ProxyJump through host `jump` for the hidden one), or "" with `error` set.
  std::string hide_behind(int hidden, int jump, std::string* error) const {
    std::string rules = "add table inet dtrain_hidden; "
                        "add chain inet dtrain_hidden input { type filter hook input priority 0 ; policy accept ; }; "
                        "add rule inet dtrain_hidden input ip saddr " + value("DTRAIN_TESTCLUSTER_CONTROL_IP") + " drop";
    CommandOutput cut = exec(std::to_string(hidden), {"nft", rules});
    if (cut.status != 0) {
      *error = "nft in " + host(hidden).name + " failed: " + cut.output;
      return "";
    }
    std::string path = state_dir() + "/ssh_config_jump";
    // The cluster's config first (its "Host *" sets user, key, known_hosts, BatchMode); ssh
    // takes the first value of each option, and the cluster's sets no ProxyJump.
    std::ofstream(path, std::ios::trunc) << "Include " << ssh_config_path() << "\nHost " << host(hidden).name
                                         << "\n  ProxyJump " << host(jump).name << "\n";
    return path;
  }

  /// Pids in a namespace (`ip netns pids`): what is still running on that host.
  std::vector<pid_t> pids_in_namespace(const std::string& ns) const {
    std::vector<pid_t> pids;
    CommandOutput listed = run_command({"ip", "netns", "pids", ns});
    std::istringstream lines(listed.output);
    long pid;
    while (lines >> pid) pids.push_back(static_cast<pid_t>(pid));
    return pids;
  }
  std::vector<pid_t> pids_on(int number) const { return pids_in_namespace(host(number).name); }

  /// pids on host `number` other than its listening sshd (i.e. what a run left behind).
  std::vector<pid_t> leftover_pids_on(int number) const {
    std::string sshd_pid = trim_copy(read_text(host(number).dir + "/sshd.pid"));
    std::vector<pid_t> left;
    for (pid_t pid : pids_on(number)) {
      if (std::to_string(pid) != sshd_pid) left.push_back(pid);
    }
    return left;
  }

  /// Polls until no host has a process besides its sshd, or `timeout_ms` passes. Returns a
  /// description of what is left ("" when clean).
  std::string wait_hosts_clean(int timeout_ms = 5000) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::string left;
      for (size_t i = 1; i <= hosts_.size(); ++i) {
        for (pid_t pid : leftover_pids_on(static_cast<int>(i))) {
          left += host(static_cast<int>(i)).name + ": pid " + std::to_string(pid) + " " +
                  trim_copy(read_text("/proc/" + std::to_string(pid) + "/cmdline")) + "\n";
        }
      }
      if (left.empty() || std::chrono::steady_clock::now() > deadline) return left;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  static std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string text = buffer.str();
    for (char& c : text) if (c == '\0') c = ' ';
    return text;
  }

 private:
  /// With the emulated Kubernetes API server: the requests it served (dtrain's kubectl calls among
  /// them) kept as build/test-artefacts/k8s/<test case>.requests.jsonl, for a user with a real
  /// cluster to compare. The test case is the --test-case= that ctest ran this binary with.
  void keep_kube_requests() const {
    std::string requests = kube_requests();
    std::error_code error;
    if (requests.empty() || !std::filesystem::exists(requests, error)) return;
    std::string name = "requests";
    {
      std::ifstream arguments("/proc/self/cmdline", std::ios::binary);
      std::string argument;
      while (std::getline(arguments, argument, '\0')) {
        if (argument.rfind("--test-case=", 0) == 0) name = argument.substr(12);
      }
    }
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
    }
    std::string directory = std::string(DTRAIN_BINARY_DIR) + "/test-artefacts/k8s";
    std::filesystem::create_directories(directory, error);
    std::filesystem::copy_file(requests, directory + "/" + name.substr(0, 120) + ".requests.jsonl",
                               std::filesystem::copy_options::overwrite_existing, error);
  }

  static std::string trim_copy(const std::string& text) { return std::string(trim(text)); }

  void load_env() {
    std::ifstream in(state_dir_guess() + "/cluster.env");
    std::string line;
    while (std::getline(in, line)) {
      size_t eq = line.find('=');
      if (eq != std::string::npos) env_[line.substr(0, eq)] = line.substr(eq + 1);
    }
    int count = std::atoi(value("DTRAIN_TESTCLUSTER_HOSTS").c_str());
    for (int i = 1; i <= count; ++i) {
      std::string n = "HOST_" + std::to_string(i) + "_";
      hosts_.push_back({value(n + "NAME"), value(n + "IP"), value(n + "DIR")});
    }
    if (hosts_.empty()) error_ = "cluster.env missing or empty in " + state_dir_guess();
  }
  std::string state_dir_guess() const {
    const char* root = std::getenv("DTRAIN_TESTCLUSTER_ROOT");
    return std::string(root && *root ? root : "/tmp/dtrain-testcluster") + "/" + prefix_;
  }

  std::string prefix_;
  std::string skip_reason_;
  std::string error_;
  bool brought_up_ = false;
  std::map<std::string, std::string> env_;
  std::vector<ClusterHost> hosts_;
};

/// While alive, this (single-threaded) process's network is the control namespace, and
/// /etc/hosts names the cluster's hosts (a private mount namespace), so in-process code such as
/// SshTransport reaches the hosts exactly as `dtrain` run in the control namespace would.
/// Sockets opened meanwhile stay in the control namespace after it ends.
class InControlNamespace {
 public:
  explicit InControlNamespace(const TestCluster& cluster) {
    saved_net_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    saved_mnt_ = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) saved_cwd_ = cwd;
    std::string ns_path = "/run/netns/" + cluster.control_namespace();
    int target = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (target < 0 || ::setns(target, CLONE_NEWNET) != 0) {
      error_ = "cannot enter " + ns_path + ": " + std::strerror(errno);
      if (target >= 0) ::close(target);
      return;
    }
    ::close(target);
    entered_net_ = true;
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(cluster.hosts_file().c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
      error_ = std::string("cannot bind the cluster's /etc/hosts: ") + std::strerror(errno);
    }
    entered_mnt_ = true;
  }
  ~InControlNamespace() {
    if (entered_mnt_ && saved_mnt_ >= 0) {
      (void)::setns(saved_mnt_, CLONE_NEWNS);
      if (!saved_cwd_.empty()) (void)::chdir(saved_cwd_.c_str());
    }
    if (entered_net_ && saved_net_ >= 0) (void)::setns(saved_net_, CLONE_NEWNET);
    if (saved_net_ >= 0) ::close(saved_net_);
    if (saved_mnt_ >= 0) ::close(saved_mnt_);
  }
  InControlNamespace(const InControlNamespace&) = delete;
  InControlNamespace& operator=(const InControlNamespace&) = delete;

  /// "" when fully entered.
  const std::string& error() const { return error_; }

 private:
  int saved_net_ = -1;
  int saved_mnt_ = -1;
  std::string saved_cwd_;
  bool entered_net_ = false;
  bool entered_mnt_ = false;
  std::string error_;
};

}  // namespace dtrain::testing

/// Skips the test case (exit 77, "skipped: <why>") when the machine cannot host the cluster;
/// fails it when `up` broke on a machine that should manage. Put it right after the cluster,
/// before anything else is created: an unavailable cluster holds nothing, so the exit leaves
/// nothing behind.
#define DTRAIN_REQUIRE_CLUSTER(cluster)                                            \
  do {                                                                             \
    if (!(cluster).available()) dtrain::testing::skip_test((cluster).skip_reason()); \
    REQUIRE_MESSAGE((cluster).error().empty(), (cluster).error());                 \
  } while (0)
