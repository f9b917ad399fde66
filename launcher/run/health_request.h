#pragma once
// config.health from the spec (issue 29): which checks each agent makes of its host, with which
// limits. The same request `dtrain hosts` runs with `dtrain agent --health-probe`.

#include <optional>
#include <string>

#include "launcher/proto/host_health.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::run {

/// None when the spec turns the checks off (health.enabled: false). `checkpoint_dir` is where
/// this run's workers write (the spec's, or the run directory's checkpoints/). The master address
/// whose route each agent checks is the user's MASTER_ADDR, else the first host when it is
/// remote, else 127.0.0.1 when every host is this one; with local and remote hosts mixed it is
/// only known once the plan is made, so it is not checked.
std::optional<proto::HealthRequest> health_request(const spec::JobSpec& spec, const std::string& checkpoint_dir);

}  // namespace dtrain::run
