#include "launcher/hosts/created_job.h"

#include <unistd.h>

#include "launcher/base/child_process.h"
#include "launcher/base/clock.h"
#include "launcher/hosts/kubernetes_hosts.h"
#include "launcher/spec/kubernetes_pods.h"

namespace dtrain::hosts {

namespace {

// Deletion at the end of a run: an API server that answers in seconds when it is well.
constexpr Millis kDeleteTimeout{60'000};
// How often the pods are listed while they start.
constexpr int64_t kPollSpacingMs = 500;

std::string in_namespace(const transport::KubectlOptions& options) {
  return options.namespace_name.empty() ? "the context's namespace" : "namespace '" + options.namespace_name + "'";
}

Status create_object(const transport::KubectlOptions& options, const std::string& what, const nlohmann::json& manifest,
                     Millis timeout) {
  Result<CommandOutput> output =
      run_command_with_input(transport::kubectl_argv(options, {"create", "-f", "-"}), manifest.dump(), timeout);
  const std::string call = "kubectl create " + what + " (" + in_namespace(options) + ")";
  if (!output) {
    return Error::user(call + ": " + output.error().message +
                       "; install kubectl (or set kubernetes.kubectl to its path) and check that the cluster answers");
  }
  if (output->exit_code != 0) return Error::user(transport::explain_kubectl_failure(call, output->err, options));
  return {};
}

std::string delete_one(const transport::KubectlOptions& options, const std::vector<std::string>& rest, Millis timeout) {
  Result<CommandOutput> output = run_command(transport::kubectl_argv(options, rest), timeout);
  const std::string call = "kubectl " + rest[0] + " " + rest[1] + " " + rest[2];
  if (!output) return call + ": " + output.error().message;
  if (output->exit_code != 0) return transport::explain_kubectl_failure(call, output->err, options);
  return "";
}

}  // namespace

JobDeletion delete_job_objects(const transport::KubectlOptions& options, events::KubernetesKind kind,
                               const std::string& job, const std::string& service, Millis timeout) {
  JobDeletion deletion;
  if (kind == events::KubernetesKind::jobset) {
    // By its full resource name: `jobset` alone could be another group's short name.
    deletion.error = delete_one(
        options, {"delete", kJobSetResource, job, "--cascade=background", "--wait=false", "--ignore-not-found"}, timeout);
    if (deletion.error.empty()) deletion.deleted.push_back("jobset/" + job);
    return deletion;
  }
  std::string job_error = delete_one(
      options, {"delete", "job", job, "--cascade=background", "--wait=false", "--ignore-not-found"}, timeout);
  if (job_error.empty()) deletion.deleted.push_back("job/" + job);
  std::string service_error =
      delete_one(options, {"delete", "service", service, "--wait=false", "--ignore-not-found"}, timeout);
  if (service_error.empty()) deletion.deleted.push_back("service/" + service);
  deletion.error = job_error;
  if (!service_error.empty()) deletion.error += (deletion.error.empty() ? "" : "; ") + service_error;
  return deletion;
}

std::string describe_created(events::KubernetesKind kind, const std::string& job, const std::string& service) {
  if (kind == events::KubernetesKind::jobset) {
    return "jobset " + job + " (its job " + job + "-" + kReplicatedJob + "-0 and service " + service + " with it)";
  }
  return "job " + job + " and service " + service;
}

std::string manual_delete_command(const KubernetesJobNames& names) {
  if (names.kind == events::KubernetesKind::jobset) return std::string("kubectl delete ") + kJobSetResource + " " + names.job;
  return "kubectl delete job,service -l " + names.selector();
}

Result<CreatedJob> CreatedJob::create(const spec::JobSpec& job, KubernetesJobNames names, const JobCreator& creator,
                                      Millis kubectl_timeout) {
  transport::KubectlOptions options = kubectl_options_for(job);
  if (names.kind == events::KubernetesKind::jobset) {
    if (Status made = create_object(options, "jobset " + names.job, render_jobset(job, names, creator), kubectl_timeout);
        !made) {
      return made.error();
    }
    return CreatedJob(std::move(options), std::move(names));
  }
  if (Status made = create_object(options, "service " + names.service, render_service(job, names, creator),
                                  kubectl_timeout);
      !made) {
    return made.error();
  }
  CreatedJob created(std::move(options), std::move(names));  // from here its destructor cleans up
  created.done_ = true;  // the Job is not there yet: only the Service to delete on an error
  if (Status made = create_object(created.options_, "job " + created.names_.job,
                                  render_job(job, created.names_, creator), kubectl_timeout);
      !made) {
    std::string left = delete_one(created.options_, {"delete", "service", created.names_.service, "--ignore-not-found"},
                                  kubectl_timeout);
    if (!left.empty()) return Error::user(made.error().message + " (and the Service it created is left: " + left + ")");
    return made.error();
  }
  created.done_ = false;
  return created;
}

CreatedJob::CreatedJob(CreatedJob&& other) noexcept
    : options_(std::move(other.options_)), names_(std::move(other.names_)), done_(other.done_),
      deletion_(std::move(other.deletion_)) {
  other.done_ = true;
}

CreatedJob& CreatedJob::operator=(CreatedJob&& other) noexcept {
  if (this == &other) return *this;
  if (!done_) (void)delete_objects(kDeleteTimeout);
  options_ = std::move(other.options_);
  names_ = std::move(other.names_);
  done_ = other.done_;
  deletion_ = std::move(other.deletion_);
  other.done_ = true;
  return *this;
}

CreatedJob::~CreatedJob() {
  if (!done_) (void)delete_objects(kDeleteTimeout);
}

JobDeletion CreatedJob::delete_objects(Millis timeout) {
  if (done_) return deletion_;
  done_ = true;
  deletion_ = delete_job_objects(options_, names_.kind, names_.job, names_.service, timeout);
  return deletion_;
}

Status CreatedJob::wait_until_ready(int pods, Millis timeout, Millis kubectl_timeout) const {
  SystemClock clock;
  const int64_t deadline = clock.monotonic_ms() + timeout.count();
  spec::JobSpec listing;
  listing.kubernetes.kubectl = options_.kubectl;
  listing.kubernetes.kubeconfig = options_.kubeconfig;
  listing.kubernetes.context = options_.context;
  listing.kubernetes.namespace_name = options_.namespace_name;
  std::string not_ready;
  int seen = 0;
  for (;;) {
    Result<spec::PodList> listed = list_pods(listing, names_.selector(), kubectl_timeout);
    if (!listed) return listed.error();
    int ready = 0;
    not_ready.clear();
    seen = static_cast<int>(listed->pods.size());
    for (const spec::Pod& pod : listed->pods) {
      std::string why = spec::pod_unusable_reason(pod);
      if (why.empty()) ++ready;
      else not_ready += (not_ready.empty() ? "" : ", ") + pod.name + " " + why;
    }
    if (ready >= pods) return {};
    if (clock.monotonic_ms() >= deadline) break;
    ::usleep(static_cast<useconds_t>(std::min<int64_t>(kPollSpacingMs, std::max<int64_t>(1, deadline - clock.monotonic_ms())) * 1000));
  }
  std::string missing = seen < pods ? "; " + std::to_string(pods - seen) + " not even created" : "";
  return Error::user("kubernetes.job: " + std::to_string(pods) + " pods of " + to_string(names_.kind) + " '" +
                     names_.job + "' (" +
                     in_namespace(options_) + ") were not all Running and Ready within kubernetes.pod_timeout (" +
                     format_duration(timeout) + "): " + (not_ready.empty() ? "none listed" : not_ready) + missing +
                     "; a node_selector no node matches, too few free nvidia.com/gpu, or an image that cannot be "
                     "pulled keeps pods Pending (kubectl describe pod NAME says which); raise kubernetes.pod_timeout "
                     "if they only start slowly");
}

}  // namespace dtrain::hosts
