#pragma once
// config.health from the spec (issue 29): which checks each agent makes of its host, with which
// limits. The same request `dtrain hosts` runs with `dtrain agent --health-probe`.

#include <optional>

#include "launcher/proto/host_health.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::run {

/// None when the spec turns the checks off (health.enabled: false). The checkpoint directory is
/// the spec's (absolute, as submit made it); the master address is the first host's name, whose
/// route each agent checks is up.
std::optional<proto::HealthRequest> health_request(const spec::JobSpec& spec);

}  // namespace dtrain::run
