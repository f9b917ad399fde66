#pragma once
// What `dtrain submit`, `dtrain run` and `dtrain resume` tell the run registry before the run
// begins: the tenant's monthly quota (from $DTRAIN_HOME/config.yaml) decides whether it may
// start, and the audit table gets one row for the action. Neither may stop a run for the
// registry's sake: a registry that is missing, locked or damaged is a warning, and the quota is
// then not checked (said so). Only a quota that is spent refuses, and `--over-quota` overrides
// it (recorded in the audit row).

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/spec/job_spec.h"
#include "launcher/spec/site_config.h"

namespace dtrain::run {

struct Admission {
  std::optional<int> refused_exit_code;  ///< set: print nothing more, return this
  std::string quota_note;                ///< "over quota (overridden): ..." or a near-quota warning, for the audit row
  std::optional<spec::SiteConfig> site;  ///< the site config as read (its health defaults apply to the run)
};

/// Whether the site's intent policy ($DTRAIN_HOME/config.yaml intent.required_for) applies: to a
/// spec file (dtrain submit), not to `dtrain run`'s command line (no intent: to give) nor to a
/// resume (the spec was admitted when it was submitted).
enum class IntentPolicy { enforced, not_applicable };

/// Admits the spec under the site config, read once: with IntentPolicy::enforced, a tenant that
/// must state an intent and did not is refused with an example of one; then the tenant's budget
/// this month. Prints warnings and a refusal (with the numbers and the override flag) to stderr
/// as `command` ("dtrain submit"); a quota refusal is audited as `action`. An unreadable site
/// config is refused.
Admission admit_under_quota(const spec::JobSpec& spec, bool over_quota, const std::string& command,
                            const std::string& action, IntentPolicy intent_policy);

/// One audit row for an action on a run; a failure to record it is a warning on stderr (the
/// action goes on). Every worker.env value of `spec` (when given) is redacted wherever it appears.
void audit_action(const std::string& command, const std::string& action, const std::string& run_id,
                  const std::string& target, nlohmann::json arguments, const std::string& result,
                  const spec::JobSpec* spec = nullptr);

/// The spec's worker.env values (env_file included): never written to the audit table.
std::vector<std::string> secret_values_of(const spec::JobSpec& spec);

}  // namespace dtrain::run
