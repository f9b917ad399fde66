#pragma once
// The audit trail: who did what to which run, appended to the registry's audit table by the
// commands that act (submit, run, stop, resume, drill, registry rebuild, a quota override).
// Arguments are a JSON object the command builds from what it was given, redacted here before
// they are written: values under secret-looking keys, every worker.env value (`--set
// worker.env.X=...` too) and every string the caller names as secret become "<redacted>".
// Recording never fails the action: the caller gets a Status to print as a warning.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/base/secrets.h"

namespace dtrain::registry {

struct AuditAction {
  std::string action;   ///< "submit", "run", "stop", "resume", "drill", "registry rebuild"
  std::string run_id;   ///< empty when the action made no run (a refused submit)
  std::string target;   ///< what it acted on beside the run: a spec file, a host
  nlohmann::json arguments = nlohmann::json::object();
  std::string result;   ///< "started", "refused: ...", "stop requested", ...
};

using dtrain::kRedacted;

/// True for a key whose last dotted part looks_secret (launcher/base/secrets.h): token, key,
/// secret, password, passwd, credential, auth, cookie, private, in any case.
bool secret_key(const std::string& key);

/// `arguments` with secrets replaced by kRedacted: values of secret keys, the value of any
/// "KEY=VALUE" string whose KEY is secret or lies under an `env` section (worker.env.X=...),
/// and every occurrence of a string in `secret_values` (4 characters or more) anywhere.
nlohmann::json redact_secrets(nlohmann::json arguments, const std::vector<std::string>& secret_values);

/// Appends `action` (redacted) to the audit table of `registry_file` (created when missing),
/// stamped now, with the actor `audit_actor()` (the login user, and the sudo user behind it).
Status record_audit(const std::string& registry_file, const AuditAction& action,
                    const std::vector<std::string>& secret_values = {});

}  // namespace dtrain::registry
