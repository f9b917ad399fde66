#pragma once
// The `srun` transport: inside a Slurm allocation, every host's agent is a task of ONE job step
// (`srun --ntasks-per-node=1 --no-kill --kill-on-bad-exit=0 --overlap ... dtrain agent --srun`),
// so Slurm's cgroups, accounting and time limit cover the agents and their workers, and one
// request to slurmctld starts them all. A step has one stdin (Slurm copies it to every task) and
// one stdout (the tasks' lines merged), so each host's agent protocol bytes travel as lines
//
//     <host> <base64 of at most kChunkBytes bytes>\n      (a chunk of that host's stream)
//     <host> .\n                                          (that host's stream has ended)
//
// in both directions: every agent keeps the lines that name its own node (SLURMD_NODENAME) and
// the supervisor sorts the agents' lines by host. Lines stay short, well under slurmstepd's
// buffer, so Slurm forwards each line whole (it splits output only at newlines). The
// relay in the agent (run_srun_agent_relay) turns its side back into a byte stream, so the agent
// itself is the same one the local and SSH transports start.
//
// The supervisor side has one thread per step (not per host) that moves srun's stdio; each
// host's connection wakes the driver's loop through its own eventfd.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/transport/transport.h"

namespace dtrain::transport {

/// Raw bytes per line: 720 bytes are 960 base64 characters, so that a line with a host name of
/// up to 60 characters stays under 1 KiB.
inline constexpr size_t kSrunChunkBytes = 720;

struct SrunOptions {
  std::string srun = "srun";             ///< the srun to run (PATH lookup)
  std::vector<std::string> hosts;        ///< every host the first step starts agents on, in order
  std::string dtrain_path;               ///< dtrain on the nodes (`<path> agent --srun`)
  std::vector<std::string> extra_args;   ///< more srun options (tests, sites)
  /// Once every agent's input ended, how long a step's srun has to end by itself before it gets
  /// SIGTERM (and 3 s later SIGKILL).
  int stop_grace_ms = 5000;
  /// Tests only: called with srun's pid when that grace is over, right before the SIGTERM. A
  /// test reaps srun here to prove that the signal then goes nowhere (not to -1, not to a reused
  /// pid).
  std::function<void(pid_t srun_pid)> before_stop_signal;
};

/// The srun argv for a step with one agent on each of `hosts`.
std::vector<std::string> srun_step_argv(const SrunOptions& options, const std::vector<std::string>& hosts);

class SrunStep;

/// Starts agents as srun steps: the first start_agent() starts one step for every host of
/// SrunOptions::hosts and hands out their connections as they are asked for; a host asked for
/// again, or one not in that list, gets a step of its own.
class SrunTransport final : public Transport {
 public:
  explicit SrunTransport(SrunOptions options);
  ~SrunTransport() override;
  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override;

 private:
  SrunOptions options_;
  std::shared_ptr<SrunStep> first_step_;
  std::vector<std::string> handed_out_;  ///< hosts of first_step_ whose connection was taken
};

/// Runs `script` (/bin/sh) once on each of `hosts` as one srun step (one task per node, beside
/// the job's other steps) and returns each node's stdout by node name (`dtrain hosts` with
/// transport: srun). Past `timeout_ms`, or when srun fails before any node answered, an Error
/// with srun's own words.
Result<std::map<std::string, std::string>> run_on_each_node(const std::string& srun,
                                                            const std::vector<std::string>& hosts,
                                                            const std::string& script, int64_t timeout_ms);

/// `dtrain agent --srun`: runs `run_agent(input_fd, output_fd)` on pipes and relays them to the
/// step's stdin/stdout in the line format above, for the node named by SLURMD_NODENAME (else the
/// hostname). Returns run_agent's exit code.
int run_srun_agent_relay(const std::function<int(int input_fd, int output_fd)>& run_agent);

}  // namespace dtrain::transport
