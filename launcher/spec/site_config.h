#pragma once
// $DTRAIN_HOME/config.yaml: the site's prices and per-tenant monthly budgets, read by
// `dtrain usage` (cost) and `dtrain submit` (quotas). Read here because launcher/spec is the only
// yaml-cpp user (docs/architecture.md §2). A missing file is no prices and no quotas; a present one is
// checked like a job spec: every problem at once, as file:line:col, unknown keys with a
// "did you mean".
//
//   cost:
//     currency: USD        # label printed with costs (default USD)
//     per_gpu_hour: 2.40
//     per_slot_hour: 0.02  # worker slots on CPU hosts (default 0)
//   quotas:                # budgets per calendar month (UTC), by tenant
//     warn_at: 0.8         # fraction of a budget at which submit warns (default 0.8)
//     default: 1000        # tenants not listed (absent: no quota for them)
//     tenants:
//       vision: 5000       # GPU-hours per month
//       nlp: {gpu_hours: 12000, slot_hours: 50000}
//   intent:
//     required_for: [nlp, vision]   # their specs must say intent: ("*": every tenant)
//   health:                # the site's own host checks, for specs that name none
//     command: /usr/sbin/nhc        # exit 0 healthy, 1 unhealthy (kept out), else a warning
//     command_timeout: 30s
//     diagnose: dcgmi diag -r 1     # before a host blamed for a failure returns
//     diagnose_timeout: 5m

#include <map>
#include <optional>
#include <set>
#include <string>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"

namespace dtrain::spec {

/// Prices of one unit-hour; present only when the file has a `cost:` section.
struct CostRates {
  std::string currency = "USD";
  double per_gpu_hour = 0;
  double per_slot_hour = 0;  ///< one worker slot for an hour on a host without GPUs
};

/// One tenant's budget for a calendar month (UTC). A limit left out is not limited.
struct TenantQuota {
  std::optional<double> gpu_hours;
  std::optional<double> slot_hours;
};

struct SiteConfig {
  std::string source_path;           ///< the file read; "" when there was none
  std::optional<CostRates> cost;     ///< none: no prices, `dtrain usage` shows no cost
  double warn_at = 0.8;              ///< quotas.warn_at
  std::optional<TenantQuota> default_quota;     ///< quotas.default: tenants not listed
  std::map<std::string, TenantQuota> tenants;   ///< quotas.tenants
  std::set<std::string> intent_required_for;    ///< intent.required_for ("*": every tenant)
  std::string health_command;                   ///< health.command ("" none)
  std::optional<Millis> health_command_timeout; ///< health.command_timeout
  std::string health_diagnose;                  ///< health.diagnose ("" none)
  std::optional<Millis> health_diagnose_timeout;
};

struct HealthSettings;
/// The spec's health settings with the site's command and diagnose where the spec names none
/// (a spec's own command, with its timeout, wins).
void apply_site_health(const SiteConfig& config, HealthSettings& health);

/// Whether the site requires `tenant`'s specs to state an intent (intent.required_for).
bool intent_required(const SiteConfig& config, const std::string& tenant);

/// A tenant's monthly budget as the registry's quota check takes it (registry::QuotaBudget has
/// the same fields; launcher/registry may not depend on launcher/spec).
struct TenantBudget {
  std::optional<double> gpu_hours;
  std::optional<double> slot_hours;
  double warn_at = 0.8;
};

/// `dtrain_home` + "/config.yaml".
std::string site_config_path(const std::string& dtrain_home);

/// Reads and checks the site config at `path`. A file that does not exist is an empty
/// SiteConfig (no prices, no quotas); every other problem is a user error of file:line:col lines.
Result<SiteConfig> load_site_config(const std::string& path);

/// Same, from text (`source_name` in diagnostics).
Result<SiteConfig> parse_site_config(const std::string& yaml_text, const std::string& source_name);

/// The tenant's budget: its own entry under quotas.tenants, else quotas.default, else none (no
/// quota). The tenant "" (a spec without one) gets the default like any unlisted tenant.
std::optional<TenantBudget> budget_for_tenant(const SiteConfig& config, const std::string& tenant);

}  // namespace dtrain::spec
