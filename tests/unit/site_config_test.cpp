// $DTRAIN_HOME/config.yaml: prices and per-tenant monthly budgets. A missing file is no prices
// and no quotas; every problem is reported at its file:line:col, unknown keys with a suggestion.

#include <doctest/doctest.h>

#include "launcher/spec/job_spec.h"
#include "launcher/spec/site_config.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::spec;

namespace {

const char* kFullConfig = R"(cost:
  currency: EUR
  per_gpu_hour: 2.40
  per_slot_hour: 0.02
quotas:
  warn_at: 0.9
  default: 1000
  tenants:
    vision: 5000
    nlp: {gpu_hours: 12000, slot_hours: 50000}
    cpu-only: {slot_hours: 300}
)";

std::string error_of(const std::string& text) {
  Result<SiteConfig> config = parse_site_config(text, "config.yaml");
  REQUIRE_FALSE(config.ok());
  return config.error().message;
}

}  // namespace

TEST_CASE("a full site config is read with its prices and budgets") {
  Result<SiteConfig> config = parse_site_config(kFullConfig, "config.yaml");
  REQUIRE_MESSAGE(config.ok(), config.error().message);
  REQUIRE(config->cost);
  CHECK(config->cost->currency == "EUR");
  CHECK(config->cost->per_gpu_hour == doctest::Approx(2.40));
  CHECK(config->cost->per_slot_hour == doctest::Approx(0.02));
  CHECK(config->warn_at == doctest::Approx(0.9));
  REQUIRE(config->default_quota);
  CHECK(*config->default_quota->gpu_hours == 1000);
  CHECK(config->tenants.size() == 3);
  CHECK(*config->tenants.at("nlp").slot_hours == 50000);

  std::optional<TenantBudget> vision = budget_for_tenant(*config, "vision");
  REQUIRE(vision);
  CHECK(*vision->gpu_hours == 5000);
  CHECK_FALSE(vision->slot_hours);
  CHECK(vision->warn_at == doctest::Approx(0.9));
  std::optional<TenantBudget> unlisted = budget_for_tenant(*config, "robotics");
  REQUIRE(unlisted);
  CHECK(*unlisted->gpu_hours == 1000);
  CHECK(budget_for_tenant(*config, "")->gpu_hours == 1000.0);  // no tenant in the spec: the default
  std::optional<TenantBudget> cpu = budget_for_tenant(*config, "cpu-only");
  REQUIRE(cpu);
  CHECK_FALSE(cpu->gpu_hours);
  CHECK(*cpu->slot_hours == 300);
}

TEST_CASE("defaults: USD, slot price 0, warn at 0.8, no default quota means unlisted tenants have none") {
  Result<SiteConfig> config = parse_site_config("cost: {per_gpu_hour: 3}\nquotas: {tenants: {vision: 10}}\n", "c.yaml");
  REQUIRE_MESSAGE(config.ok(), config.error().message);
  CHECK(config->cost->currency == "USD");
  CHECK(config->cost->per_slot_hour == 0);
  CHECK(config->warn_at == doctest::Approx(0.8));
  CHECK_FALSE(budget_for_tenant(*config, "nlp"));
  CHECK(budget_for_tenant(*config, "vision")->gpu_hours == 10.0);
}

TEST_CASE("a missing file is no prices and no quotas, an empty one too") {
  dtrain::testing::TempDir dir;
  Result<SiteConfig> missing = load_site_config(site_config_path(dir.path));
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->cost);
  CHECK(missing->source_path.empty());
  CHECK_FALSE(budget_for_tenant(*missing, "vision"));
  Result<SiteConfig> empty = load_site_config(dir.write("config.yaml", "# nothing yet\n"));
  REQUIRE(empty.ok());
  CHECK_FALSE(empty->cost);
  CHECK(empty->source_path == dir.path + "/config.yaml");
}

TEST_CASE("negative and non-numeric values are errors at their file:line:col") {
  std::string message = error_of("cost:\n  per_gpu_hour: -1\nquotas:\n  tenants:\n    vision: lots\n");
  CHECK(message.find("config.yaml:2:17: cost.per_gpu_hour: expected a number of at least 0") != std::string::npos);
  CHECK(message.find("got '-1'") != std::string::npos);
  CHECK(message.find("config.yaml:5:13: quotas.tenants.vision: expected a number of at least 0 (GPU-hours per month), got 'lots'") !=
        std::string::npos);
  CHECK(error_of("quotas:\n  warn_at: 1.5\n").find("config.yaml:2:12: quotas.warn_at: expected a number from 0 to 1") !=
        std::string::npos);
  CHECK(error_of("cost:\n  per_gpu_hour: nan\n").find("got 'nan'") != std::string::npos);
  CHECK(error_of("quotas:\n  tenants:\n    nlp: {gpu_hours: [1]}\n").find("quotas.tenants.nlp.gpu_hours: expected a number") !=
        std::string::npos);
}

TEST_CASE("unknown keys say what was meant, and a config without a price or budget is an error") {
  std::string message = error_of("cost:\n  per_gpu_hours: 2.4\nquota:\n  default: 5\n");
  CHECK(message.find("config.yaml:2:3: cost.per_gpu_hours: unknown key 'per_gpu_hours'; did you mean 'per_gpu_hour'?") !=
        std::string::npos);
  CHECK(message.find("config.yaml:3:1: quota: unknown key 'quota'; did you mean 'quotas'?") != std::string::npos);
  CHECK(message.find("no price given") == std::string::npos);  // the misspelt key's message says the fix
  CHECK(error_of("cost: {currency: EUR}\n").find("config.yaml:1:7: cost: no price given; write per_gpu_hour:") !=
        std::string::npos);
  CHECK(error_of("quotas:\n  tenants:\n    nlp: {gpu_hour: 5}\n").find("did you mean 'gpu_hours'?") != std::string::npos);
  CHECK(error_of("- cost\n").find("config.yaml:1:1: expected a mapping with cost:, quotas:, intent: and/or health:") != std::string::npos);
  CHECK(error_of("cost: {per_gpu_hour: 1\n").find("YAML syntax error") != std::string::npos);
}

TEST_CASE("health: the site's check command and diagnostics apply to specs that name none") {
  Result<spec::SiteConfig> config = spec::parse_site_config(
      "health:\n  command: /usr/sbin/nhc\n  command_timeout: 20s\n  diagnose: dcgmi diag -r 1\n", "config.yaml");
  REQUIRE(config.ok());
  spec::HealthSettings without;
  spec::apply_site_health(*config, without);
  CHECK(without.command == "/usr/sbin/nhc");
  CHECK(without.command_timeout == Millis(20'000));
  CHECK(without.diagnose == "dcgmi diag -r 1");
  spec::HealthSettings own;
  own.command = "/opt/site/check.sh";
  spec::apply_site_health(*config, own);
  CHECK(own.command == "/opt/site/check.sh");  // the spec's own wins, with its own timeout
  CHECK(own.command_timeout == Millis(30'000));
  Result<spec::SiteConfig> bad = spec::parse_site_config("health:\n  comand: x\n", "config.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("did you mean 'command'?") != std::string::npos);
}
