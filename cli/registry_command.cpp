// `dtrain registry rebuild`: re-creates $DTRAIN_HOME/registry.db from the run directories'
// events.jsonl and state.json (the run directories are the source of truth; a damaged or
// missing registry, or one older than the runs, is repaired this way). See man/dtrain-registry.1.
// `dtrain registry fill-synthetic` (hidden) fills a registry with synthetic runs for the
// benchmark (scripts/bench/registry.sh): a measuring tool, not a user command.

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_rebuild.h"
#include "launcher/run/governance.h"
#include "launcher/run/quarantine_gate.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::cli {
namespace {

int rebuild() {
  std::string path = registry::registry_path();
  auto tenant_of_spec = [](const std::string& spec_path) {
    spec::LoadResult loaded = spec::load_job_spec(spec_path, {}, spec::EnvValues::names_only);
    return loaded.ok() ? loaded.spec->tenant : std::string();
  };
  // The cross-run quarantine rule of each run's own spec (health.quarantine).
  auto rule_of_spec = [](const std::string& spec_path) {
    spec::LoadResult loaded = spec::load_job_spec(spec_path, {}, spec::EnvValues::names_only);
    return loaded.ok() ? run::quarantine_rule_of(loaded.spec->health) : registry::QuarantineRule{};
  };
  Result<registry::RebuildSummary> rebuilt = registry::rebuild_registry(path, runs_root(), tenant_of_spec, rule_of_spec);
  if (!rebuilt) {
    std::fprintf(stderr, "dtrain registry rebuild: %s\n", rebuilt.error().message.c_str());
    run::audit_action("dtrain registry rebuild", "registry rebuild", "", path, {{"runs_root", runs_root()}},
                      "failed: " + rebuilt.error().message);
    return exit_code_for(rebuilt.error());
  }
  run::audit_action("dtrain registry rebuild", "registry rebuild", "", path, {{"runs_root", runs_root()}},
                    "rebuilt: " + std::to_string(rebuilt->runs) + " runs, " + std::to_string(rebuilt->allocations) +
                        " allocations, " + std::to_string(rebuilt->warnings.size()) + " warnings");
  for (const std::string& warning : rebuilt->warnings) {
    std::fprintf(stderr, "dtrain registry rebuild: warning: %s\n", warning.c_str());
  }
  std::printf("rebuilt %s from %s: %d runs, %d allocations", path.c_str(), runs_root().c_str(), rebuilt->runs,
              rebuilt->allocations);
  if (rebuilt->audit_rows_kept > 0) std::printf(", %d audit rows kept", rebuilt->audit_rows_kept);
  if (rebuilt->skipped_lines > 0) std::printf("; %d damaged event lines skipped", rebuilt->skipped_lines);
  std::printf("\n");
  return 0;
}

struct SyntheticOptions {
  int runs = 100000;
  int hosts_per_run = 2;
};

/// Runs spread over a year across 20 tenants, 200 users and 500 hosts, each host with 8 GPUs for
/// 1 to 48 hours, and every tenth run shrinking to one host half-way: the shape of a busy cluster's
/// year, inserted through the module's API in one transaction.
int fill_synthetic(const SyntheticOptions& options) {
  // For the benchmark only (scripts/bench/registry.sh, in a scratch $DTRAIN_HOME): never into a
  // registry that holds real runs, whose usage reports would then count 100,000 fake ones.
  if (::access(registry::registry_path().c_str(), F_OK) == 0) {
    std::fprintf(stderr, "dtrain registry fill-synthetic: %s exists; this benchmark filler only writes a new "
                 "registry (set DTRAIN_HOME to an empty directory)\n", registry::registry_path().c_str());
    return to_int(ExitCode::usage);
  }
  Result<registry::RegistryDb> opened = registry::RegistryDb::open(registry::registry_path(), true);
  if (!opened) {
    std::fprintf(stderr, "dtrain registry fill-synthetic: %s\n", opened.error().message.c_str());
    return exit_code_for(opened.error());
  }
  registry::RegistryDb& db = *opened;
  const int64_t year_start_ms = 1767225600000;  // 2026-01-01T00:00:00Z
  const int64_t hour_ms = 3600 * 1000;
  Status status = db.begin();
  for (int index = 0; status && index < options.runs; ++index) {
    uint64_t mixed = static_cast<uint64_t>(index) * 2654435761u;
    registry::RunRow run;
    run.id = "synthetic-" + std::to_string(index);
    run.tenant = "tenant-" + std::to_string(mixed % 20);
    run.user = "user-" + std::to_string((mixed >> 8) % 200);
    run.name = "synthetic";
    run.submitted_ms = year_start_ms + static_cast<int64_t>(mixed % (365 * 24)) * hour_ms;
    int64_t hours = 1 + static_cast<int64_t>((mixed >> 16) % 48);
    run.started_ms = run.submitted_ms;
    run.ended_ms = run.submitted_ms + hours * hour_ms;
    run.state = "succeeded";
    run.exit_code = 0;
    status = db.insert_run(run);
    bool shrinks = index % 10 == 0;
    for (int host = 0; status && host < options.hosts_per_run; ++host) {
      registry::AllocationRow allocation;
      allocation.run_id = run.id;
      allocation.host = "gpu" + std::to_string((mixed + static_cast<uint64_t>(host)) % 500);
      allocation.units = 8;
      allocation.start_ms = *run.started_ms;
      allocation.end_ms = shrinks && host > 0 ? *run.started_ms + hours * hour_ms / 2 : *run.ended_ms;
      allocation.end_reason = shrinks && host > 0 ? "host lost: synthetic" : "run succeeded";
      status = db.insert_allocation(allocation);
    }
  }
  if (status) status = db.commit();
  if (!status) {
    std::fprintf(stderr, "dtrain registry fill-synthetic: %s\n", status.error().message.c_str());
    return exit_code_for(status.error());
  }
  std::printf("inserted %d synthetic runs into %s\n", options.runs, db.path().c_str());
  return 0;
}

}  // namespace

void add_registry_command(CLI::App& app, CommandContext& context) {
  CLI::App* command = app.add_subcommand(
      "registry", "The run registry ($DTRAIN_HOME/registry.db) behind `dtrain usage`: rebuild it from the run directories");
  command->require_subcommand(1);
  CLI::App* rebuild_command = command->add_subcommand(
      "rebuild", "Re-create the registry from every run directory's events (also repairs a damaged registry)");
  rebuild_command->callback([&context] { context.exit_code = rebuild(); });

  auto synthetic = std::make_shared<SyntheticOptions>();
  CLI::App* fill_command = command->add_subcommand("fill-synthetic", "Insert synthetic runs (benchmark only)");
  fill_command->group("");  // hidden: scripts/bench/registry.sh
  fill_command->add_option("--runs", synthetic->runs, "How many runs")->check(CLI::PositiveNumber);
  fill_command->add_option("--hosts-per-run", synthetic->hosts_per_run, "Hosts per run")->check(CLI::PositiveNumber);
  fill_command->callback([synthetic, &context] { context.exit_code = fill_synthetic(*synthetic); });
}

}  // namespace dtrain::cli
