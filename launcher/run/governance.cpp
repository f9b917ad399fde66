#include "launcher/run/governance.h"

#include <cstdio>

#include "launcher/base/clock.h"
#include "launcher/base/exit_code.h"
#include "launcher/registry/audit_trail.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/site_config.h"

namespace dtrain::run {

std::vector<std::string> secret_values_of(const spec::JobSpec& spec) {
  std::vector<std::string> values;
  for (const auto& [key, value] : spec.worker.env) values.push_back(value);
  return values;
}

void audit_action(const std::string& command, const std::string& action, const std::string& run_id,
                  const std::string& target, nlohmann::json arguments, const std::string& result,
                  const spec::JobSpec* spec) {
  registry::AuditAction row{action, run_id, target, std::move(arguments), result};
  Status recorded = registry::record_audit(registry::registry_path(), row,
                                           spec ? secret_values_of(*spec) : std::vector<std::string>{});
  if (!recorded) {
    std::fprintf(stderr, "%s: warning: the audit table was not updated (%s); the %s goes on\n", command.c_str(),
                 recorded.error().message.c_str(), action.c_str());
  }
}

namespace {

/// The refusal of a spec without intent: when the site requires one of its tenant, with an example.
bool refused_without_intent(const spec::JobSpec& spec, const spec::SiteConfig& config, const std::string& config_path,
                            const std::string& command) {
  if (spec.intent.given || !spec::intent_required(config, spec.tenant)) return false;
  std::string tenant = spec.tenant.empty() ? "a spec without a tenant" : "tenant " + spec.tenant;
  std::fprintf(stderr,
               "%s: %s: the site requires %s to state the job's intent (%s: intent.required_for), and the spec has "
               "no intent:; add one, e.g.\n"
               "  intent:\n"
               "    model: {parameters: 7B, precision: bf16, optimizer: adamw}\n"
               "    data: {tokens: 200B}\n"
               "    target_duration: 72h\n"
               "    gpu_memory: 60GB\n"
               "    recovery: {max_recovery: 5m, max_lost: 200 steps, mode: restart}\n"
               "(man 5 dtrain-spec, intent)\n",
               command.c_str(), spec.source_path.empty() ? "the spec" : spec.source_path.c_str(), tenant.c_str(),
               config_path.c_str());
  return true;
}

}  // namespace

Admission admit_under_quota(const spec::JobSpec& spec, bool over_quota, const std::string& command,
                            const std::string& action, IntentPolicy intent_policy) {
  Admission admission;
  std::string config_path = spec::site_config_path(dtrain_home());
  Result<spec::SiteConfig> config = spec::load_site_config(config_path);
  if (!config) {
    // The site's quotas cannot be read: refusing is the admin's intent (a typo must not lift
    // every budget), and the message says which line to fix.
    std::fprintf(stderr, "%s: the site config cannot be read, so quotas cannot be checked:\n%s\n", command.c_str(),
                 config.error().message.c_str());
    admission.refused_exit_code = exit_code_for(config.error());
    return admission;
  }
  admission.site = *config;
  if (intent_policy == IntentPolicy::enforced && refused_without_intent(spec, *config, config_path, command)) {
    admission.refused_exit_code = to_int(ExitCode::usage);
    return admission;
  }
  std::optional<spec::TenantBudget> budget = spec::budget_for_tenant(*config, spec.tenant);
  if (!budget) return admission;
  std::string tenant = spec.tenant.empty() ? "(no tenant)" : spec.tenant;
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), true);
  if (!db) {
    std::fprintf(stderr, "%s: warning: tenant %s has a quota, but it was not checked: %s\n", command.c_str(),
                 tenant.c_str(), db.error().message.c_str());
    admission.quota_note = "quota not checked: " + db.error().message;
    return admission;
  }
  Result<registry::QuotaVerdict> verdict =
      registry::check_quota(*db, registry::QuotaBudget{budget->gpu_hours, budget->slot_hours, budget->warn_at},
                            spec.tenant, SystemClock().wall_ms());
  if (!verdict) {
    std::fprintf(stderr, "%s: warning: tenant %s has a quota, but it was not checked: %s\n", command.c_str(),
                 tenant.c_str(), verdict.error().message.c_str());
    admission.quota_note = "quota not checked: " + verdict.error().message;
    return admission;
  }
  switch (verdict->kind) {
    case registry::QuotaKind::none:
    case registry::QuotaKind::ok:
      return admission;
    case registry::QuotaKind::near:
      std::fprintf(stderr, "%s: warning: %s; past the budget, submissions are refused\n", command.c_str(),
                   verdict->message.c_str());
      admission.quota_note = "near quota: " + verdict->message;
      return admission;
    case registry::QuotaKind::over:
      break;
  }
  if (over_quota) {
    std::fprintf(stderr, "%s: warning: %s; going on because of --over-quota (recorded in the audit table)\n",
                 command.c_str(), verdict->message.c_str());
    admission.quota_note = "over quota, overridden with --over-quota: " + verdict->message;
    return admission;
  }
  std::fprintf(stderr,
               "%s: refused: %s\n  the budget is in %s; `dtrain usage --by tenant --since %s` shows the use;\n"
               "  to run anyway, add --over-quota (the override is recorded in the audit table)\n",
               command.c_str(), verdict->message.c_str(), config->source_path.c_str(), verdict->month.c_str());
  audit_action(command, action, "", "tenant " + tenant, {{"tenant", spec.tenant}, {"over_quota", false}},
               "refused: over quota: " + verdict->message, &spec);
  admission.refused_exit_code = to_int(ExitCode::usage);
  return admission;
}

}  // namespace dtrain::run
