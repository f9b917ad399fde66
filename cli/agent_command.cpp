// `dtrain agent`: the per-host agent the supervisor starts over SSH or a pipe. Hidden from
// --help: people never run it; its stdin/stdout carry the framed agent protocol and nothing
// else (diagnostics go to stderr).

#include "cli/commands.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/health_checks.h"
#include "launcher/agent/stack_probe.h"
#include "launcher/transport/srun_transport.h"

namespace dtrain::cli {

void add_agent_command(CLI::App& app, CommandContext& context) {
  CLI::App* agent = app.add_subcommand("agent", "per-host agent, started by the supervisor (internal)");
  agent->group("");
  // --srun: one task of the supervisor's srun step; stdin/stdout carry every host's lines
  // (launcher/transport/srun_transport.h), this node's are relayed to the agent.
  static bool srun = false;
  agent->add_flag("--srun", srun, "started as a task of an srun step (transport: srun)");
  // --stack-probe REQUEST: print this host's software stack for a worker command and exit
  // (`dtrain hosts` runs it on each host; REQUEST is config.stack's JSON).
  static std::string stack_probe;
  agent->add_option("--stack-probe", stack_probe, "print this host's software stack fingerprint (JSON) and exit");
  // --health-probe REQUEST: check this host's health once and print the report (JSON) (`dtrain
  // hosts` runs it on each host; REQUEST is config.health's JSON).
  static std::string health_probe;
  agent->add_option("--health-probe", health_probe, "check this host's health once, print the report (JSON) and exit");
  agent->callback([&context] {
    if (!health_probe.empty()) {
      context.exit_code = agent::run_health_probe(health_probe);
      return;
    }
    if (!stack_probe.empty()) {
      context.exit_code = agent::run_stack_probe(stack_probe);
      return;
    }
    context.exit_code = srun ? transport::run_srun_agent_relay(agent::run_agent) : agent::run_agent(0, 1);
  });
}

}  // namespace dtrain::cli
