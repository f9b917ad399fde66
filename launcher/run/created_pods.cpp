#include "launcher/run/created_pods.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "launcher/base/identity.h"
#include "launcher/base/version.h"
#include "launcher/hosts/kubernetes_access.h"
#include "launcher/hosts/kubernetes_hosts.h"
#include "launcher/run/driver.h"

namespace dtrain::run {

namespace {
// One kubectl call (create, get): an API server that answers in seconds when it is well.
constexpr Millis kKubectlTimeout{60'000};
}  // namespace

Result<hosts::CreatedJob> create_pods_as_hosts(spec::JobSpec& spec, const std::string& run_id, int attempt,
                                               std::vector<std::string>& left_out) {
  const spec::KubernetesJobTemplate& pods = *spec.kubernetes.job;
  // The container the manifest names, so that every exec and spec.yaml say which.
  if (spec.kubernetes.container.empty()) spec.kubernetes.container = "main";
  // A JobSet or an Indexed Job (kubernetes.job.kind), asked of the cluster before anything is made.
  Result<hosts::JobKindChoice> kind = hosts::resolve_job_kind(spec, kKubectlTimeout);
  if (!kind) return kind.error();
  if (!kind->warning.empty()) std::fprintf(stderr, "warning: %s\n", kind->warning.c_str());
  hosts::KubernetesJobNames names = hosts::kubernetes_job_names(run_id, attempt, pods.pods, kind->kind);
  hosts::JobCreator creator{run_id, run_owner(), this_hostname(), static_cast<int>(::getpid()), kVersion};
  Result<hosts::CreatedJob> created = hosts::CreatedJob::create(spec, names, creator, kKubectlTimeout);
  if (!created) return created.error();
  const std::string where =
      spec.kubernetes.namespace_name.empty() ? "" : " in namespace " + spec.kubernetes.namespace_name;
  const std::string what = hosts::describe_created(names.kind, names.job, names.service);
  std::fprintf(stderr, "dtrain: created %s%s; waiting up to %s for its %d pods\n", what.c_str(), where.c_str(),
               format_duration(spec.kubernetes.pod_timeout).c_str(), pods.pods);
  if (Status ready = created->wait_until_ready(pods.pods, spec.kubernetes.pod_timeout, kKubectlTimeout); !ready) {
    hosts::JobDeletion deletion = created->delete_objects(kKubectlTimeout);
    std::string cleanup = deletion.error.empty() ? "; " + what + " were deleted"
                                                 : "; deleting them failed too: " + deletion.error;
    return Error::user(ready.error().message + cleanup);
  }
  Result<std::vector<std::string>> taken = hosts::take_pods_as_hosts(spec, names.selector(), kKubectlTimeout);
  if (!taken) return taken.error();  // `created` deletes them as it goes
  left_out = std::move(taken).value();
  return created;
}

Result<std::optional<hosts::CreatedJob>> take_kubernetes_hosts(spec::JobSpec& spec, const std::string& run_id) {
  std::optional<hosts::CreatedJob> created;
  std::vector<std::string> left_out;
  if (spec.kubernetes.job) {
    Result<hosts::CreatedJob> made = create_pods_as_hosts(spec, run_id, 0, left_out);
    if (!made) return made.error();
    created.emplace(std::move(made).value());
  } else {
    Result<std::vector<std::string>> taken = hosts::take_pods_as_hosts(spec, kKubectlTimeout);
    if (!taken) return taken.error();
    left_out = std::move(taken).value();
  }
  for (const std::string& pod : left_out) std::fprintf(stderr, "warning: pod %s: not used\n", pod.c_str());
  return created;
}

Result<ResumedPods> recreate_pods_as_hosts(spec::JobSpec& spec, const RunDirectory& run) {
  Result<std::vector<LoggedEvent>> logged = read_logged_events(run.events_path(), [](const EventLineError&) {});
  if (!logged) return Error::infra("cannot read the run log: " + logged.error().message);
  CreatedObjects before = created_objects(*logged);
  ResumedPods pods;
  for (const events::KubernetesCreated& left : before.undeleted) {
    // Only what this run created, by the names it recorded: what a supervisor that died left.
    hosts::JobDeletion deletion =
        hosts::delete_job_objects(hosts::kubectl_options_for(spec), left.kind, left.job, left.service, kKubectlTimeout);
    events::KubernetesDeleted event{{left.namespace_name, left.job, left.service, left.kind},
                                    "left by the run's previous supervisor; deleted by dtrain resume", std::nullopt};
    if (!deletion.error.empty()) event.error = deletion.error;
    std::fprintf(stderr, "dtrain resume: %s %s that the previous supervisor left%s\n",
                 deletion.error.empty() ? "deleted" : "could not delete",
                 hosts::describe_created(left.kind, left.job, left.service).c_str(),
                 deletion.error.empty() ? "" : (": " + deletion.error).c_str());
    pods.cleared.push_back(std::move(event));
  }
  std::vector<std::string> left_out;
  Result<hosts::CreatedJob> made = create_pods_as_hosts(spec, run.id(), before.attempts, left_out);
  if (!made) return Error::user(run.spec_path() + ": " + made.error().message);
  pods.created.emplace(std::move(made).value());
  for (const std::string& pod : left_out) std::fprintf(stderr, "dtrain resume: warning: pod %s: not used\n", pod.c_str());
  return pods;
}

events::KubernetesCreated created_event(const hosts::CreatedJob& created, int pods) {
  const hosts::KubernetesJobNames& names = created.names();
  return {{created.namespace_name(), names.job, names.service, names.kind}, names.selector(), pods};
}

spec::JobSpec spec_to_keep(const spec::JobSpec& spec) {
  spec::JobSpec kept = spec;
  if (spec.kubernetes.job) {
    kept.hosts.clear();
    kept.spares.clear();
  }
  return kept;
}

CreatedObjects created_objects(const std::vector<LoggedEvent>& events) {
  CreatedObjects found;
  for (const LoggedEvent& logged : events) {
    std::visit(events::Overloaded{
        [&](const events::KubernetesCreated& created) {
          ++found.attempts;
          found.undeleted.push_back(created);
        },
        [&](const events::KubernetesDeleted& deleted) {
          std::erase_if(found.undeleted, [&](const events::KubernetesCreated& created) {
            return created.job == deleted.job && created.kind == deleted.kind &&
                   created.namespace_name == deleted.namespace_name && !deleted.error;
          });
        },
        [](const auto&) {},
    }, logged.event);
  }
  return found;
}

}  // namespace dtrain::run
