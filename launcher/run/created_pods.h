#pragma once
// kubernetes.job around a driver: what `dtrain submit` and `dtrain resume` do before the plan
// (create the run's Indexed Job and headless Service, or its JobSet, wait for their pods, take
// the pods as hosts) and what resume clears first (objects a supervisor that died had created). The objects
// themselves are launcher/hosts' CreatedJob; the driver deletes them at the end of the run.

#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/events/events.h"
#include "launcher/hosts/created_job.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::run {

/// Creates attempt `attempt` of run `run_id`'s Job and Service, or JobSet (kubernetes.job; kind
/// auto asks discovery for the JobSet CRD first, kind jobset without it is an error before
/// anything is created), waits up to kubernetes.pod_timeout for its pods, and fills
/// spec.hosts/spares from them (as selector mode does). Says what it does on stderr; pods left out go to `left_out`. On an error (user kind)
/// nothing it created is left.
Result<hosts::CreatedJob> create_pods_as_hosts(spec::JobSpec& spec, const std::string& run_id, int attempt,
                                               std::vector<std::string>& left_out);

/// hosts: kubernetes at submit: the pods of the selector, or (kubernetes.job) the pods created for
/// attempt 0 of `run_id`, taken as spec's hosts; the pods left out are warned about on stderr.
/// The CreatedJob when dtrain created them.
Result<std::optional<hosts::CreatedJob>> take_kubernetes_hosts(spec::JobSpec& spec, const std::string& run_id);

/// kubernetes.job at `dtrain resume` of `run` (whose log is read): what a supervisor that died
/// left is deleted (`cleared`, for the run log), and fresh pods are created as the next attempt
/// and taken as hosts.
struct ResumedPods {
  std::optional<hosts::CreatedJob> created;
  std::vector<events::KubernetesDeleted> cleared;
};
Result<ResumedPods> recreate_pods_as_hosts(spec::JobSpec& spec, const RunDirectory& run);

/// The kubernetes.created event of `created`.
events::KubernetesCreated created_event(const hosts::CreatedJob& created, int pods);

/// The spec as spec.yaml keeps it: with kubernetes.job, the template and not the pods (they are
/// deleted at the end; a resume creates fresh ones). Otherwise `spec` itself.
spec::JobSpec spec_to_keep(const spec::JobSpec& spec);

/// What the run's log says was created and not deleted since (a supervisor that died), oldest
/// first, and how many times objects were created in all (the next attempt's number).
struct CreatedObjects {
  std::vector<events::KubernetesCreated> undeleted;
  int attempts = 0;
};
CreatedObjects created_objects(const std::vector<LoggedEvent>& events);

}  // namespace dtrain::run
