// `dtrain plan SPEC [--json] [--without HOST]... [--set key=value]...`: the rank layout the job
// would get (without the hosts the registry holds in quarantine, as submit plans it, each named
// with why), and with --without the layout after losing those hosts (what the supervisor would
// do), so a user can check a shrink or a spare before it happens.

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/plan_advice.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/base/clock.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/registry/registry_db.h"
#include "launcher/run/quarantine_gate.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::cli {
namespace {

struct PlanOptions {
  std::string spec_path;
  bool json = false;
  std::vector<std::string> without;  ///< repeated and/or comma-separated
  std::vector<std::string> overrides;
  bool advise = false;
  AdviseOptions advice;
};

void print_error(const std::string& message) {
  std::fprintf(stderr, "dtrain plan: %s\n", message.c_str());
}

void print_out(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

int run_plan(const PlanOptions& options) {
  std::vector<spec::Override> overrides;
  for (const std::string& text : options.overrides) {
    Result<spec::Override> parsed = spec::parse_override(text);
    if (!parsed) {
      print_error(parsed.error().message);
      return to_int(ExitCode::usage);
    }
    overrides.push_back(*parsed);
  }
  std::vector<std::string> without;
  for (const std::string& name : options.without)
    if (std::string_view trimmed = trim(name); !trimmed.empty()) without.emplace_back(trimmed);

  spec::LoadResult loaded = spec::load_job_spec(options.spec_path, overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.message().c_str());
    return to_int(ExitCode::usage);
  }
  const spec::JobSpec& job = *loaded.spec;
  if (options.advise) return run_plan_advice(job, options.advice, options.json);

  // As submit plans it: without the hosts the registry holds in quarantine (said why).
  run::QuarantineGate quarantine = run::read_quarantine_gate(job, registry::registry_path(), SystemClock().wall_ms());
  if (quarantine.warning) std::fprintf(stderr, "dtrain plan: warning: %s\n", quarantine.warning->c_str());
  Result<plan::RankPlan> base = run::plan_without_quarantined(job, quarantine);
  if (!base) {
    print_error(options.spec_path + ": " + base.error().message);
    return to_int(ExitCode::usage);
  }
  const auto dump = [](const nlohmann::json& json) {
    // Host names come from the user: replace invalid UTF-8 rather than throw.
    return json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  nlohmann::json quarantined = quarantine.event().to_json()["hosts"];
  std::string quarantine_text;
  for (const std::string& line : quarantine.lines()) quarantine_text += line + "\n";
  if (!quarantine_text.empty()) quarantine_text += "\n";
  if (without.empty()) {
    print_out(options.json ? dump({{"spec", options.spec_path}, {"quarantined", quarantined}, {"plan", plan::to_json(*base)}})
                           : quarantine_text + plan::to_text(*base));
    return to_int(ExitCode::ok);
  }

  std::vector<std::string> all_without = quarantine.hosts();
  all_without.insert(all_without.end(), without.begin(), without.end());
  Result<plan::RankPlan> after = plan::make_plan(job, all_without);
  if (!after) {
    print_error(options.spec_path + ": " + after.error().message);
    return to_int(ExitCode::usage);
  }
  if (options.json) {
    print_out(dump({{"spec", options.spec_path},
                    {"quarantined", quarantined},
                    {"before", plan::to_json(*base)},
                    {"diff", plan::diff_text(*base, *after)},
                    {"plan", plan::to_json(*after)}}));
  } else {
    print_out(quarantine_text + "before: " + plan::summary_line(*base) + "\n" + "without " + join(without, ", ") +
              ": " + plan::diff_text(*base, *after) + "\n\n" + plan::to_text(*after));
  }
  return to_int(ExitCode::ok);
}

}  // namespace

void add_plan_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand(
      "plan", "Show the rank layout (hosts, ranks, groups, batch) a job spec gets");
  command->add_option("spec", options->spec_path, "job spec (YAML)")->required();
  command->add_flag("--json", options->json, "print the plan as JSON (as in plan-<gen>.json)");
  command->add_option("--without", options->without,
                      "plan as if these hosts were lost: spares replace them, else the job "
                      "shrinks (repeatable, or comma-separated)")
      ->delimiter(',');
  command->add_option("--set", options->overrides, "override a spec key: --set parallelism.tensor=2");
  command->add_flag("--advise", options->advise,
                    "advise a layout and a checkpoint interval from the spec's intent (man dtrain-plan)");
  command->add_option("--gpus-per-host", options->advice.gpus_per_host, "--advise: GPUs per host (default: slots_per_host)");
  command->add_option("--gpu-memory", options->advice.gpu_memory, "--advise: one GPU's memory, e.g. 80GB");
  command->add_option("--network-gbps", options->advice.network_gbps, "--advise: network between hosts, Gbit/s");
  command->add_option("--checkpoint-cost", options->advice.checkpoint_cost, "--advise: one save's time, e.g. 30s");
  command->add_option("--mtbf", options->advice.mtbf, "--advise: the job's mean time between failures, e.g. 24h");
  command->add_option("--step-time", options->advice.step_time, "--advise: a step's time, e.g. 1.2s (default: measured in the job's earlier runs in the registry)");
  command->callback([options, &context] {
    try {
      context.exit_code = run_plan(*options);
    } catch (const std::exception& error) {
      print_error(std::string("internal bug: ") + error.what());
      context.exit_code = to_int(ExitCode::internal);
    }
  });
}

}  // namespace dtrain::cli
