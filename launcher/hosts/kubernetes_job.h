#pragma once
// kubernetes.job: what dtrain creates for a run, as data. The names of the Indexed Job and the
// headless Service, or of the JobSet (derived from the run id, valid wherever Kubernetes puts
// them), and their manifests (JSON for `kubectl create -f -`). Pure functions: created_job.h
// does the kubectl calls. docs/kubernetes.md lists what a user sees of these objects.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "launcher/events/event_catalogue.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::hosts {

/// The JobSet CRD's resource as kubectl names it, its API group and the version dtrain creates.
inline constexpr const char* kJobSetResource = "jobsets.jobset.x-k8s.io";
inline constexpr const char* kJobSetGroup = "jobset.x-k8s.io";
inline constexpr const char* kJobSetVersion = "v1alpha2";

/// The one replicatedJob of the JobSet dtrain creates: its child Job is `<jobset>-workers-0`.
inline constexpr const char* kReplicatedJob = "workers";

/// The names of what dtrain creates for one attempt of a run.
struct KubernetesJobNames {
  events::KubernetesKind kind = events::KubernetesKind::job;  ///< an Indexed Job, or a JobSet
  std::string job;        ///< the Indexed Job, or the JobSet
  std::string service;    ///< the headless Service, the pods' subdomain (a JobSet's controller makes it)
  std::string run_label;  ///< the value of dtrain.io/run (the run id, made a valid label value)

  /// The Indexed Job whose pods are the run's: `job`, or the JobSet's child `<job>-workers-0`.
  /// Its pods' hostnames are `<pods_job()>-<index>`.
  std::string pods_job() const;

  /// `dtrain.io/run=<run_label>,dtrain.io/job=<job>` (spec::kRunLabel, spec::kJobLabel): this
  /// attempt's pods, none of another's.
  std::string selector() const;
  bool operator==(const KubernetesJobNames&) const = default;
};

/// The names for attempt `attempt` (0 at submit, 1 for the first resume that creates pods, ...)
/// of run `run_id` with `pods` pods, as `kind` creates them. Each is a DNS-1035 label (a Service
/// name's rule: lower-case letters, digits and '-', starting with a letter, ending with a letter
/// or digit) short enough that a pod's hostname `<pods_job()>-<highest index>` is still at most
/// 63 characters; a run id too long for that keeps its start and ends with a hash of the whole
/// id, so two runs never share a name.
KubernetesJobNames kubernetes_job_names(std::string_view run_id, int attempt, int pods,
                                        events::KubernetesKind kind = events::KubernetesKind::job);

/// `value` made a valid label value: at most 63 of [A-Za-z0-9_.-], starting and ending with a
/// letter or digit ("" stays "").
std::string label_value(std::string_view value);

/// Who creates the objects, for their annotations.
struct JobCreator {
  std::string run_id;
  std::string user;
  std::string host;
  int pid = 0;
  std::string dtrain_version;
};

/// The Indexed Job: completions = parallelism = kubernetes.job.pods, restartPolicy Never,
/// backoffLimitPerIndex 0 and maxFailedIndexes = pods (a lost pod fails its index alone), the template's image and command, the nvidia.com/gpu limit, nodeSelector,
/// not-ready/unreachable tolerations, terminationGracePeriodSeconds = preempt_grace, subdomain =
/// the Service; labelled dtrain.io/run and annotated with who made it. `job.kubernetes.job` must
/// be set.
nlohmann::json render_job(const spec::JobSpec& job, const KubernetesJobNames& names, const JobCreator& creator);

/// The headless Service (clusterIP None) selecting this attempt's pods: stable DNS names
/// `<job>-<index>.<service>` for the pods on a real cluster.
nlohmann::json render_service(const spec::JobSpec& job, const KubernetesJobNames& names, const JobCreator& creator);

/// The JobSet (jobset.x-k8s.io/v1alpha2) in the Job's place: one replicatedJob `workers`, 1
/// replica, whose template is render_job's (metadata without the name, the same spec), so its
/// child Job `<jobset>-workers-0` is that Indexed Job; network.enableDNSHostnames with subdomain =
/// names.service (the JobSet controller makes that headless Service, so dtrain makes none);
/// failurePolicy.maxRestarts 0 (dtrain replaces lost pods itself; a restart would recreate every
/// pod under the running run). Labelled and annotated as the Job.
nlohmann::json render_jobset(const spec::JobSpec& job, const KubernetesJobNames& names, const JobCreator& creator);

}  // namespace dtrain::hosts
