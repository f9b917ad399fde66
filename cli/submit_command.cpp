// dtrain submit SPEC [--detach] [--over-quota] [--set key=value]... [--follow] [--output WHOSE]

#include <climits>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/run/run_driver.h"

namespace dtrain::cli {

void add_follow_options(CLI::App& command, FollowOptions& options) {
  command.add_flag("--follow,-f", options.follow,
                   "show the workers' output here as they print it, like dtrain run (--output auto)");
  command.add_option("--output", options.output,
                     "whose output to show here: all, rank0, none, or auto (every rank up to 8, rank 0 beyond); "
                     "default none, or auto with --follow");
}

Result<run::OutputChoice> FollowOptions::choice() const {
  if (output.empty()) return follow ? run::OutputChoice::automatic : run::OutputChoice::none;
  if (std::optional<run::OutputChoice> chosen = run::parse_output_choice(output)) return *chosen;
  return Error::user("--output '" + printable(output, 64) + "': write all, rank0, none or auto");
}

std::string this_executable() {
  char path[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return "dtrain";
  return std::string(path, static_cast<size_t>(length));
}

void add_submit_command(CLI::App& app, CommandContext& context) {
  struct Options {
    std::string spec_path;
    std::vector<std::string> sets;
    bool detach = false;
    bool over_quota = false;
    FollowOptions follow;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("submit", "Launch a job and supervise it until it ends");
  command->add_option("spec", options->spec_path, "job spec (YAML, see dtrain-spec(5))")->required();
  command->add_option("--set", options->sets, "override a spec key by its dotted path: key=value")
      ->allow_extra_args(false);
  command->add_flag("--detach,-d", options->detach, "print the run id and supervise in the background");
  add_follow_options(*command, options->follow);
  command->add_flag("--over-quota", options->over_quota,
                    "start even though the tenant's monthly GPU-hour budget is spent (recorded in the audit table)");
  command->callback([options, &context] {
    run::SubmitOptions submit;
    submit.spec_path = options->spec_path;
    submit.detach = options->detach;
    submit.over_quota = options->over_quota;
    Result<run::OutputChoice> output = options->follow.choice();
    if (!output) {
      std::fprintf(stderr, "dtrain submit: %s\n", output.error().message.c_str());
      context.exit_code = to_int(ExitCode::usage);
      return;
    }
    submit.output = *output;
    submit.dtrain_exe = this_executable();
    for (const std::string& text : options->sets) {
      Result<spec::Override> parsed = spec::parse_override(text);
      if (!parsed) {
        std::fprintf(stderr, "dtrain submit: --set %s: %s\n", text.c_str(), parsed.error().message.c_str());
        context.exit_code = to_int(ExitCode::usage);
        return;
      }
      submit.overrides.push_back(*parsed);
    }
    context.exit_code = run::submit(submit);
  });
}

}  // namespace dtrain::cli
