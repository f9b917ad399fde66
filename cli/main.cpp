// dtrain: launch and supervise distributed training jobs. See man/dtrain.1.

#include <cstdio>
#include <exception>
#include <string_view>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/version.h"

int main(int argc, char** argv) {
  using namespace dtrain;
  if (argc >= 2 && std::string_view(argv[1]) == "run") return cli::run_command_main(argc - 2, argv + 2);
  CLI::App app{"dtrain: launch and supervise distributed training jobs", "dtrain"};
  app.set_version_flag("--version", std::string("dtrain ") + kVersion);
  app.require_subcommand(1);
  cli::CommandContext context;
  cli::add_validate_command(app, context);
  cli::add_plan_command(app, context);
  cli::add_submit_command(app, context);
  cli::add_run_command(app, context);
  cli::add_resume_command(app, context);
  cli::add_status_command(app, context);
  cli::add_report_command(app, context);
  cli::add_logs_command(app, context);
  cli::add_stop_command(app, context);
  cli::add_hosts_command(app, context);
  cli::add_drill_command(app, context);
  cli::add_registry_command(app, context);
  cli::add_usage_command(app, context);
  cli::add_history_command(app, context);
  cli::add_audit_command(app, context);
  cli::add_review_command(app, context);
  cli::add_agent_command(app, context);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : to_int(ExitCode::usage);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "dtrain: internal bug: %s\n", error.what());
    return to_int(ExitCode::internal);
  }
  return context.exit_code;
}
