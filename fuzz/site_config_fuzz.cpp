// Fuzz target: the site config ($DTRAIN_HOME/config.yaml: prices and per-tenant monthly budgets),
// which `dtrain submit` reads before every run and `dtrain usage` before every report.
// Input: the file's bytes.
// Invariants: no exception escapes; an error names the file and never says "internal bug"; a
// config that loads has finite, non-negative prices and budgets and a warn_at in [0, 1]; every
// tenant's budget lookup gives one of the budgets the file holds.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "launcher/spec/site_config.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

void check_hours(const std::optional<double>& hours, const char* what) {
  if (hours) check(std::isfinite(*hours) && *hours >= 0, what, std::to_string(*hours));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(as_text(data, size));
  Result<spec::SiteConfig> config = spec::parse_site_config(text, "config.yaml");
  if (!config) {
    const std::string& message = config.error().message;
    check(message.rfind("config.yaml", 0) == 0, "an error names the file first", message);
    check(message.find("internal bug") == std::string::npos, "no input is an internal bug", message);
    return 0;
  }
  check(config->warn_at >= 0 && config->warn_at <= 1, "warn_at is a fraction", std::to_string(config->warn_at));
  if (config->cost) {
    check(std::isfinite(config->cost->per_gpu_hour) && config->cost->per_gpu_hour >= 0, "a GPU-hour price is >= 0");
    check(std::isfinite(config->cost->per_slot_hour) && config->cost->per_slot_hour >= 0, "a slot-hour price is >= 0");
  }
  if (config->default_quota) {
    check_hours(config->default_quota->gpu_hours, "the default GPU-hour budget is >= 0");
    check_hours(config->default_quota->slot_hours, "the default slot-hour budget is >= 0");
  }
  for (const auto& [tenant, quota] : config->tenants) {
    check_hours(quota.gpu_hours, "a tenant's GPU-hour budget is >= 0");
    check_hours(quota.slot_hours, "a tenant's slot-hour budget is >= 0");
    std::optional<spec::TenantBudget> budget = spec::budget_for_tenant(*config, tenant);
    check(budget.has_value(), "a listed tenant has a budget", tenant);
    check(budget->gpu_hours == quota.gpu_hours && budget->slot_hours == quota.slot_hours,
          "a listed tenant gets its own budget", tenant);
  }
  std::optional<spec::TenantBudget> unlisted = spec::budget_for_tenant(*config, "\x01unlisted-tenant");
  check(unlisted.has_value() == config->default_quota.has_value(), "an unlisted tenant gets the default, or none");
  return 0;
}
