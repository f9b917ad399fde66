// `dtrain validate SPEC [--set key=value]... [--resolved]`: checks a job spec and reports every
// problem at once. Exit 0 when valid, 2 (usage) when not.

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::cli {
namespace {

struct ValidateOptions {
  std::string spec_path;
  std::vector<std::string> overrides;
  bool resolved = false;
};

// Arguments that a shell would split or expand are shown quoted, so the line can be pasted.
std::string command_line(const std::vector<std::string>& argv) {
  std::vector<std::string> shown;
  for (const std::string& argument : argv) {
    bool plain = !argument.empty() && argument.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                          "-_./=:,+@%") == std::string::npos;
    shown.push_back(plain ? argument : shell_quote(argument));
  }
  return join(shown, " ");
}

std::string plural(size_t count, const char* word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

int run_validate(const ValidateOptions& options) {
  std::vector<spec::Override> overrides;
  bool bad_override = false;
  for (const std::string& text : options.overrides) {
    auto parsed = spec::parse_override(text);
    if (!parsed) {
      std::fprintf(stderr, "%s\n", parsed.error().message.c_str());
      bad_override = true;
      continue;
    }
    overrides.push_back(*parsed);
  }
  if (bad_override) return to_int(ExitCode::usage);

  spec::LoadResult result = spec::load_job_spec(options.spec_path, overrides);
  if (!result.ok()) {
    for (const spec::Diagnostic& diagnostic : result.diagnostics) {
      std::fprintf(stderr, "%s\n", diagnostic.to_string().c_str());
    }
    std::fprintf(stderr, "%s: %s\n", options.spec_path.c_str(),
                 (plural(result.diagnostics.size(), "problem") + "; see man 5 dtrain-spec").c_str());
    return to_int(ExitCode::usage);
  }
  for (const spec::Diagnostic& warning : result.warnings) std::fprintf(stderr, "warning: %s\n", warning.to_string().c_str());
  const spec::JobSpec& job = *result.spec;
  if (options.resolved) {  // as spec.yaml: no secret values (worker.pass_env, env_file names)
    std::fputs(spec::to_yaml(job).c_str(), stdout);
    return to_int(ExitCode::ok);
  }
  long slots = 0;
  for (const spec::HostEntry& host : job.hosts) slots += host.slots;
  std::string hosts = plural(job.hosts.size(), "host");
  if (!job.spares.empty()) hosts += " (+" + plural(job.spares.size(), "spare") + ")";
  std::printf("%s: valid — %s, %s, worker: %s\n", options.spec_path.c_str(), hosts.c_str(),
              plural(static_cast<size_t>(slots), "slot").c_str(), command_line(job.worker.command).c_str());
  return to_int(ExitCode::ok);
}

}  // namespace

void add_validate_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* command = app.add_subcommand("validate", "Check a job spec and report every problem (exit 0 valid, 2 invalid)");
  command->add_option("spec", options->spec_path, "job spec (YAML, see man 5 dtrain-spec)")->required();
  command->add_option("--set", options->overrides, "override a spec key by its dotted path: --set elastic.max_restarts=3")
      ->type_name("KEY=VALUE")
      ->take_all()
      ->allow_extra_args(false);
  command->add_flag("--resolved", options->resolved,
                    "print the resolved spec (hosts expanded, defaults filled) instead of the summary");
  command->callback([options, &context] {
    try {
      context.exit_code = run_validate(*options);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "dtrain validate: internal bug: %s\n", error.what());
      context.exit_code = to_int(ExitCode::internal);
    }
  });
}

}  // namespace dtrain::cli
