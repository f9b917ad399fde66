#include "launcher/spec/site_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <exception>

#include "launcher/spec/job_spec.h"
#include "launcher/spec/spec_reader.h"

namespace dtrain::spec {

namespace {

const std::vector<std::string> kTopKeys = {"cost", "quotas", "intent", "health"};
const std::vector<std::string> kCostKeys = {"currency", "per_gpu_hour", "per_slot_hour"};
const std::vector<std::string> kQuotaKeys = {"warn_at", "default", "tenants"};
const std::vector<std::string> kBudgetKeys = {"gpu_hours", "slot_hours"};

/// A finite number of at least 0 (at most `max` when given); `meaning` says what it is in the
/// message, so the user sees the unit they should write.
std::optional<double> read_number(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                  const std::string& meaning, std::optional<double> max = std::nullopt) {
  if (node == nullptr) return std::nullopt;
  std::string expected = max ? "a number from 0 to " + std::to_string(static_cast<int>(*max)) + " (" + meaning + ")"
                             : "a number of at least 0 (" + meaning + ")";
  if (!node->IsScalar()) {
    sink.error(*node, key, "expected " + expected + ", got " + describe(*node));
    return std::nullopt;
  }
  const std::string& text = node->Scalar();
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
      value < 0 || (max && value > *max)) {
    sink.error(*node, key, "expected " + expected + ", got " + single_quoted(text));
    return std::nullopt;
  }
  return value;
}

/// `5000` (GPU-hours) or `{gpu_hours: 12000, slot_hours: 50000}`.
std::optional<TenantQuota> read_budget(DiagnosticSink& sink, const YAML::Node& node, const std::string& key) {
  TenantQuota quota;
  if (node.IsScalar()) {
    quota.gpu_hours = read_number(sink, &node, key, "GPU-hours per month");
    return quota.gpu_hours ? std::optional<TenantQuota>(quota) : std::nullopt;
  }
  if (!node.IsMap()) {
    sink.error(node, key, "expected GPU-hours per month (5000) or {gpu_hours: 5000, slot_hours: 20000}, got " +
                              describe(node));
    return std::nullopt;
  }
  Section budget(sink, &node, key, kBudgetKeys);
  quota.gpu_hours = read_number(sink, budget.get("gpu_hours"), budget.path("gpu_hours"), "GPU-hours per month");
  quota.slot_hours = read_number(sink, budget.get("slot_hours"), budget.path("slot_hours"), "slot-hours per month");
  if (!quota.gpu_hours && !quota.slot_hours) {
    if (budget.get("gpu_hours") == nullptr && budget.get("slot_hours") == nullptr) {
      sink.error(node, key, "no budget given; write gpu_hours: and/or slot_hours:");
    }
    return std::nullopt;
  }
  return quota;
}

void read_cost(DiagnosticSink& sink, const Section& top, SiteConfig& config) {
  const YAML::Node* node = top.get("cost");
  if (node == nullptr) return;
  Section cost(sink, node, "cost", kCostKeys);
  if (cost.node() == nullptr) return;  // not a mapping: reported
  CostRates rates;
  if (auto currency = read_string(sink, cost.get("currency"), cost.path("currency"))) {
    if (currency->empty()) {
      sink.error(*cost.get("currency"), cost.path("currency"), "is empty; write a label such as USD or EUR");
    } else {
      rates.currency = *currency;
    }
  }
  auto per_gpu = read_number(sink, cost.get("per_gpu_hour"), cost.path("per_gpu_hour"), "price of one GPU for an hour");
  auto per_slot = read_number(sink, cost.get("per_slot_hour"), cost.path("per_slot_hour"),
                              "price of one worker slot on a CPU host for an hour");
  // No price at all, and no misspelt key already reported (that one's message says the fix).
  size_t known_keys_given = cost.get("currency") ? 1 : 0;
  if (cost.get("per_gpu_hour") == nullptr && cost.get("per_slot_hour") == nullptr && node->size() == known_keys_given) {
    sink.error(*node, "cost", "no price given; write per_gpu_hour: (and per_slot_hour: for CPU hosts)");
  }
  rates.per_gpu_hour = per_gpu.value_or(0);
  rates.per_slot_hour = per_slot.value_or(0);
  config.cost = rates;
}

void read_quotas(DiagnosticSink& sink, const Section& top, SiteConfig& config) {
  Section quotas(sink, top.get("quotas"), "quotas", kQuotaKeys);
  if (auto warn_at = read_number(sink, quotas.get("warn_at"), quotas.path("warn_at"),
                                 "the fraction of a budget at which submit warns", 1.0)) {
    config.warn_at = *warn_at;
  }
  if (const YAML::Node* fallback = quotas.get("default")) {
    config.default_quota = read_budget(sink, *fallback, quotas.path("default"));
  }
  const YAML::Node* tenants = quotas.get("tenants");
  if (tenants == nullptr) return;
  if (!tenants->IsMap()) {
    sink.error(*tenants, quotas.path("tenants"), "expected a mapping of tenant: budget (vision: 5000), got " +
                                                     describe(*tenants));
    return;
  }
  for (auto it = tenants->begin(); it != tenants->end(); ++it) {
    std::string tenant = it->first.IsScalar() ? it->first.Scalar() : describe(it->first);
    std::string key = quotas.path("tenants") + "." + tenant;
    if (config.tenants.count(tenant) > 0) {
      sink.error(it->first, key, "tenant " + single_quoted(tenant) + " is given twice; keep one");
      continue;
    }
    if (auto budget = read_budget(sink, it->second, key)) config.tenants.emplace(tenant, *budget);
  }
}

// intent.required_for: the tenants whose specs must state an intent; "*" is every tenant (a spec
// without a tenant included).
void read_intent_policy(DiagnosticSink& sink, const Section& top, SiteConfig& config) {
  Section intent(sink, top.get("intent"), "intent", {"required_for"});
  if (auto tenants = read_string_list(sink, intent.get("required_for"), intent.path("required_for"), true)) {
    for (const std::string& tenant : *tenants) {
      if (tenant.empty()) {
        sink.error(*intent.get("required_for"), intent.path("required_for"), "holds an empty tenant; write a tenant name or '*' for every tenant");
        continue;
      }
      config.intent_required_for.insert(tenant);
    }
  }
}

// health: the site's own check and diagnostics, for specs that name none.
void read_health_defaults(DiagnosticSink& sink, const Section& top, SiteConfig& config) {
  Section health(sink, top.get("health"), "health", {"command", "command_timeout", "diagnose", "diagnose_timeout"});
  auto read_command = [&](const char* key, std::string& out) {
    const YAML::Node* node = health.get(key);
    if (node == nullptr) return;
    if (!node->IsScalar() || node->Scalar().empty()) {
      sink.error(*node, health.path(key), "expected a command line (run with sh -c on each host), got " + describe(*node));
      return;
    }
    out = node->Scalar();
  };
  read_command("command", config.health_command);
  read_command("diagnose", config.health_diagnose);
  config.health_command_timeout = read_duration(sink, health.get("command_timeout"), health.path("command_timeout"), Millis(100));
  config.health_diagnose_timeout = read_duration(sink, health.get("diagnose_timeout"), health.path("diagnose_timeout"), Millis(100));
}

}  // namespace

void apply_site_health(const SiteConfig& config, HealthSettings& health) {
  if (health.command.empty() && !config.health_command.empty()) {
    health.command = config.health_command;
    if (config.health_command_timeout) health.command_timeout = *config.health_command_timeout;
  }
  if (health.diagnose.empty() && !config.health_diagnose.empty()) {
    health.diagnose = config.health_diagnose;
    if (config.health_diagnose_timeout) health.diagnose_timeout = *config.health_diagnose_timeout;
  }
}

bool intent_required(const SiteConfig& config, const std::string& tenant) {
  return config.intent_required_for.count("*") > 0 || (!tenant.empty() && config.intent_required_for.count(tenant) > 0);
}

std::string site_config_path(const std::string& dtrain_home) { return dtrain_home + "/config.yaml"; }

Result<SiteConfig> parse_site_config(const std::string& yaml_text, const std::string& source_name) {
  DiagnosticSink sink(source_name, {});
  SiteConfig config;
  config.source_path = source_name;
  try {
    YAML::Node root = YAML::Load(yaml_text);
    // An empty file (or one of comments) is a config with nothing in it.
    if (root.IsDefined() && !root.IsNull()) {
      if (!root.IsMap()) {
        sink.error_at(source_name, 1, 1, "", "expected a mapping with cost:, quotas:, intent: and/or health:, got " + describe(root));
      } else {
        const YAML::Node& const_root = root;
        Section top(sink, &const_root, "", kTopKeys);
        read_cost(sink, top, config);
        read_quotas(sink, top, config);
        read_intent_policy(sink, top, config);
        read_health_defaults(sink, top, config);
      }
    }
  } catch (const YAML::ParserException& error) {
    int line = error.mark.is_null() ? 0 : error.mark.line + 1;
    int column = error.mark.is_null() ? 0 : error.mark.column + 1;
    sink.error_at(source_name, line, column, "", "YAML syntax error: " + error.msg +
                                                     "; check the indentation and the ':' after each key");
  } catch (const std::exception& error) {
    sink.error_at(source_name, 0, 0, "", std::string("internal bug: unexpected error while reading the site config: ") +
                                             error.what());
  }
  if (!sink.empty()) {
    std::string message;
    for (const Diagnostic& diagnostic : sink.take()) message += (message.empty() ? "" : "\n") + diagnostic.to_string();
    return Error::user(message);
  }
  return config;
}

Result<SiteConfig> load_site_config(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 && errno == ENOENT) return SiteConfig{};
  Result<std::string> text = read_text_file(path);
  if (!text) return Error::user(text.error().message + "; the site config (prices, quotas) is read from this path");
  return parse_site_config(*text, path);
}

std::optional<TenantBudget> budget_for_tenant(const SiteConfig& config, const std::string& tenant) {
  auto own = config.tenants.find(tenant);
  const TenantQuota* quota = own != config.tenants.end() ? &own->second
                             : config.default_quota    ? &*config.default_quota
                                                       : nullptr;
  if (quota == nullptr || (!quota->gpu_hours && !quota->slot_hours)) return std::nullopt;
  return TenantBudget{quota->gpu_hours, quota->slot_hours, config.warn_at};
}

}  // namespace dtrain::spec
