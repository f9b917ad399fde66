#pragma once
// The hosts of a run as a drill reaches them from outside the run: which are this machine
// (signal directly) and which are remote (a shell command over SSH with the job spec's ssh
// settings, read back from the run directory's spec.yaml), and the agent pid that the
// supervisor recorded in hosts/<host>.json.

#include <optional>
#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/base/child_process.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/job_spec.h"
#include "launcher/transport/ssh_transport.h"

namespace dtrain::hosts {

/// The job spec's ssh: section as transport options (client, ssh_config, user, port, keys,
/// known_hosts, host-key policy, connect timeout, max_parallel). The one mapping from spec to
/// transport, for every place that reaches the job's hosts: the driver, `dtrain hosts`, drills.
transport::SshOptions ssh_options_for(const spec::JobSpec& job);

class RunHosts {
 public:
  /// Loads the run's spec.yaml. A spec that no longer loads is an error (infra) naming it.
  static Result<RunHosts> open(const RunDirectory& directory);

  const spec::JobSpec& spec() const { return spec_; }
  /// A host of the spec (hosts or spares).
  const spec::HostEntry* entry(const std::string& host) const;
  /// Every host name of the spec, spares last (for messages).
  std::vector<std::string> names() const;
  /// Reached through the local transport: the agent runs on this machine.
  bool is_local(const std::string& host) const;
  /// hosts/<host>.json "agent_pid"; nullopt when the host never connected.
  std::optional<int> agent_pid(const std::string& host) const;

  /// Runs `command` with /bin/sh on `host`: here for a local host, over SSH otherwise. At most
  /// `timeout` in all; errors (infra) when the command could not be run or did not end.
  Result<CommandOutput> shell(const std::string& host, const std::string& command, Millis timeout) const;

  /// SIGKILLs the agent and every worker (with its process group) on `host`, agent first, as
  /// a host death would: nothing gets to report. Returns the kill's wall-clock ms (the host's
  /// own clock for a remote host when it reports one, else this machine's after the command).
  Result<int64_t> kill_all(const std::string& host, int agent_pid, const std::vector<int>& worker_pids) const;

  /// Those of `pids` that are still processes of run `run_id` on `host`: alive, not a zombie,
  /// and carrying DTRAIN_RUN_ID=<run_id> or running `dtrain agent` (so a reused pid is not
  /// taken for ours).
  Result<std::vector<int>> still_running(const std::string& host, const std::vector<int>& pids,
                                         const std::string& run_id) const;

 private:
  RunHosts(RunDirectory directory, spec::JobSpec spec) : directory_(std::move(directory)), spec_(std::move(spec)) {}
  RunDirectory directory_;
  spec::JobSpec spec_;
};

/// This machine's host name (gethostname), as the supervisor records it in state.json.
std::string this_host_name();

/// The shell script still_running() runs (exposed for unit tests): prints one pid per line.
std::string still_running_script(const std::vector<int>& pids, const std::string& run_id);

}  // namespace dtrain::hosts
