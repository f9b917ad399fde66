// `dtrain agent`: the per-host agent the supervisor starts over SSH or a pipe. Hidden from
// --help: people never run it; its stdin/stdout carry the framed agent protocol and nothing
// else (diagnostics go to stderr).

#include "cli/commands.h"
#include "launcher/agent/agent.h"

namespace dtrain::cli {

void add_agent_command(CLI::App& app, CommandContext& context) {
  app.add_subcommand("agent", "per-host agent, started by the supervisor (internal)")
      ->group("")
      ->callback([&context] { context.exit_code = agent::run_agent(0, 1); });
}

}  // namespace dtrain::cli
