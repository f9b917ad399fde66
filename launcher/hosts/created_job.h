#pragma once
// kubernetes.job: the Indexed Job and headless Service, or the JobSet, dtrain creates for a run
// (names and manifests from kubernetes_job.h), waited for until their pods run, and deleted by
// name when the run ends. CreatedJob owns them as a unique_ptr owns memory: whoever holds it deletes them
// (the submit or resume flow until the driver takes it, then the driver at its end), and a flow
// that returns early on an error deletes them by leaving scope. Only what this process created
// is ever deleted: by the names it created, in their namespace.

#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/hosts/kubernetes_job.h"
#include "launcher/spec/job_spec.h"
#include "launcher/transport/kubectl_transport.h"

namespace dtrain::hosts {

/// What one deletion did, for the run's kubernetes.deleted event and messages.
struct JobDeletion {
  std::vector<std::string> deleted;  ///< "job/x", "service/x", "jobset/x" (already gone counts as deleted)
  std::string error;                 ///< "" when all went; else what kubectl said
};

/// Job: `kubectl delete job NAME --cascade=background --wait=false` and `kubectl delete service
/// NAME`; JobSet: `kubectl delete jobsets.jobset.x-k8s.io NAME --cascade=background
/// --wait=false` alone (its child Job, their pods and its Service go with it). Each
/// --ignore-not-found, in `options`' namespace. Used by CreatedJob, and by resume for what a
/// supervisor that died had created (its kubernetes.created event names them).
JobDeletion delete_job_objects(const transport::KubectlOptions& options, events::KubernetesKind kind,
                               const std::string& job, const std::string& service, Millis timeout);

/// For messages: "job J and service S", or "jobset J (its job J-workers-0 and service S with it)".
std::string describe_created(events::KubernetesKind kind, const std::string& job, const std::string& service);

/// The command that deletes them by hand, for a warning when dtrain could not.
std::string manual_delete_command(const KubernetesJobNames& names);

class CreatedJob {
 public:
  /// names.kind Job: creates the Service, then the Job (`kubectl create -f -`, each with its
  /// manifest on stdin); on an error nothing is left: a Service already created is deleted
  /// again. JobSet: creates the JobSet alone. Errors (user kind) name the object, the namespace
  /// and what kubectl said.
  static Result<CreatedJob> create(const spec::JobSpec& job, KubernetesJobNames names, const JobCreator& creator,
                                   Millis kubectl_timeout);

  CreatedJob(CreatedJob&& other) noexcept;
  /// As a unique_ptr's: what this held is deleted first (unless deleted or released).
  CreatedJob& operator=(CreatedJob&& other) noexcept;
  CreatedJob(const CreatedJob&) = delete;
  /// Deletes the objects unless delete_objects() or release() ran.
  ~CreatedJob();

  const KubernetesJobNames& names() const { return names_; }
  /// The namespace as the spec names it ("" is the kubeconfig context's own).
  const std::string& namespace_name() const { return options_.namespace_name; }

  /// Waits, up to `timeout`, until `pods` pods of names().selector() are Running and Ready.
  /// On the timeout the error (user kind) names each pod that is not, with its phase or reason,
  /// and how many were asked; the caller deletes (or lets go of) this object.
  Status wait_until_ready(int pods, Millis timeout, Millis kubectl_timeout) const;

  /// Deletes the Job (its pods go with it, background cascade) and the Service, or the JobSet
  /// (with all it made). Once: a second call returns what the first did.
  JobDeletion delete_objects(Millis timeout);
  bool deleted() const { return done_; }

  /// Forgets the objects without deleting them: the foreground half of a `--detach`, whose
  /// background supervisor deletes them.
  void release() { done_ = true; }

 private:
  CreatedJob(transport::KubectlOptions options, KubernetesJobNames names)
      : options_(std::move(options)), names_(std::move(names)) {}

  transport::KubectlOptions options_;
  KubernetesJobNames names_;
  bool done_ = false;
  JobDeletion deletion_;
};

}  // namespace dtrain::hosts
