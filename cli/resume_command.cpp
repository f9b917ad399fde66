// dtrain resume RUN [--detach] [--over-quota] [--follow] [--output WHOSE]: continue a run whose supervisor died, from its newest checkpoint.

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/run/run_driver.h"

namespace dtrain::cli {

void add_resume_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<run::ResumeOptions>();
  auto follow = std::make_shared<FollowOptions>();
  CLI::App* command = app.add_subcommand(
      "resume", "Continue a run whose supervisor died (or that was stopped) from its newest checkpoint");
  command->add_option("run", options->run, "run id or unique prefix (see `dtrain status`)")->required();
  command->add_flag("--detach,-d", options->detach, "print the run id and supervise in the background");
  command->add_flag("--over-quota", options->over_quota,
                    "resume even though the tenant's monthly budget is spent (recorded in the audit table)");
  add_follow_options(*command, *follow);
  command->callback([options, follow, &context] {
    Result<run::OutputChoice> output = follow->choice();
    if (!output) {
      std::fprintf(stderr, "dtrain resume: %s\n", output.error().message.c_str());
      context.exit_code = to_int(ExitCode::usage);
      return;
    }
    options->output = *output;
    options->dtrain_exe = this_executable();
    context.exit_code = run::resume(*options);
  });
}

}  // namespace dtrain::cli
