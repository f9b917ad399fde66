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

/// Past this a host's clock offset is a warning (as in `dtrain hosts`).
inline constexpr int64_t kClockOffsetWarnMs = 1000;

/// The "clock offset" check the supervisor adds to a remote host's report: the offset it
/// measured of the host's clock (the hello, refined by a ping's round trip). A skewed clock does
/// not stop training, but the run log orders failures across hosts by time: a warning.
proto::HealthCheck clock_offset_check(int64_t offset_ms);

}  // namespace dtrain::run
