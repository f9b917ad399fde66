#pragma once
// One file per subcommand; each adds itself to the CLI11 app and, when chosen, stores its exit
// code in `exit_code`. CLI11 is used only in cli/.

#include <string>

#include <CLI/CLI.hpp>

#include "launcher/base/result.h"
#include "launcher/run/console.h"

namespace dtrain::cli {

struct CommandContext {
  int exit_code = 0;
};

/// --follow and --output of the commands that supervise in the foreground (submit, resume):
/// whose output the terminal shows. dtrain run has its own parser and shows `auto` by default.
struct FollowOptions {
  bool follow = false;
  std::string output;  ///< empty: not given
  /// --output wins; else auto with --follow, none without. A wrong word is a usage error.
  Result<run::OutputChoice> choice() const;
};
void add_follow_options(CLI::App& command, FollowOptions& options);

/// The absolute path of this dtrain binary (/proc/self/exe): agents and drills run it again.
std::string this_executable();

void add_validate_command(CLI::App& app, CommandContext& context);
void add_plan_command(CLI::App& app, CommandContext& context);
void add_submit_command(CLI::App& app, CommandContext& context);
void add_resume_command(CLI::App& app, CommandContext& context);
void add_status_command(CLI::App& app, CommandContext& context);
void add_report_command(CLI::App& app, CommandContext& context);
void add_logs_command(CLI::App& app, CommandContext& context);
void add_stop_command(CLI::App& app, CommandContext& context);
void add_hosts_command(CLI::App& app, CommandContext& context);
void add_drill_command(CLI::App& app, CommandContext& context);
void add_run_command(CLI::App& app, CommandContext& context);    // for --help; see run_command_main
void add_agent_command(CLI::App& app, CommandContext& context);  // hidden: run by the supervisor
void add_registry_command(CLI::App& app, CommandContext& context);
void add_usage_command(CLI::App& app, CommandContext& context);
void add_history_command(CLI::App& app, CommandContext& context);
void add_audit_command(CLI::App& app, CommandContext& context);
void add_review_command(CLI::App& app, CommandContext& context);

/// `dtrain run ARGS...` (argv after "run"), parsed without CLI11: everything after the script is
/// the script's, so main() calls this before CLI11 sees the command line. Returns the exit code.
int run_command_main(int argc, char** argv);

}  // namespace dtrain::cli
