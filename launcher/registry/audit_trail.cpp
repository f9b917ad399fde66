#include "launcher/registry/audit_trail.h"

#include <algorithm>
#include <cctype>

#include "launcher/base/clock.h"
#include "launcher/base/identity.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

using nlohmann::json;

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

/// "worker.env.HF_TOKEN" and "env.X" lie under an env section; so does "HF_TOKEN" in "env".
bool under_env_section(const std::string& dotted_key) {
  std::string key = "." + lower(dotted_key) + ".";
  return key.find(".env.") != std::string::npos && lower(dotted_key) != "env";
}

json redact_value(json value, const std::vector<std::string>& secret_values, bool secret_context) {
  if (value.is_object()) {
    json out = json::object();
    for (auto& [key, member] : value.items()) {
      bool secret = secret_context || secret_key(key) || lower(key) == "env";
      out[key] = redact_value(member, secret_values, secret);
    }
    return out;
  }
  if (value.is_array()) {
    for (json& item : value) item = redact_value(item, secret_values, secret_context);
    return value;
  }
  if (secret_context) return kRedacted;
  if (!value.is_string()) return value;
  std::string text = value.get<std::string>();
  // "KEY=VALUE" (a --set override, an env assignment): the value goes when the key says secret.
  if (size_t equals = text.find('='); equals != std::string::npos && equals > 0) {
    std::string key = text.substr(0, equals);
    if (key.find_first_of(" \t\n") == std::string::npos && (secret_key(key) || under_env_section(key))) {
      text = key + "=" + kRedacted;
    }
  }
  return redact_values(std::move(text), secret_values);
}

}  // namespace

bool secret_key(const std::string& key) {
  std::string_view last = key;
  if (size_t dot = last.rfind('.'); dot != std::string_view::npos) last = last.substr(dot + 1);
  return looks_secret(last);
}

json redact_secrets(json arguments, const std::vector<std::string>& secret_values) {
  return redact_value(std::move(arguments), secret_values, false);
}

Status record_audit(const std::string& registry_file, const AuditAction& action,
                    const std::vector<std::string>& secret_values) {
  AuditRow row;
  row.at_ms = SystemClock().wall_ms();
  row.actor = audit_actor();
  row.action = action.action;
  row.run_id = action.run_id;
  row.target = redact_secrets(json(action.target), secret_values).get<std::string>();
  row.arguments = redact_secrets(action.arguments, secret_values).dump(-1, ' ', false, json::error_handler_t::replace);
  row.result = redact_secrets(json(action.result), secret_values).get<std::string>();
  Result<RegistryDb> db = RegistryDb::open(registry_file, true);
  if (!db) return db.error();
  return db->append_audit(row);
}

}  // namespace dtrain::registry
