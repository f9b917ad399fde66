#include "launcher/hosts/kubernetes_job.h"

#include <algorithm>
#include <cstdio>

#include "launcher/runlog/run_directory.h"
#include "launcher/spec/kubernetes_pods.h"

namespace dtrain::hosts {

using nlohmann::json;

namespace {

constexpr size_t kMaxLabel = 63;  // a DNS label, a label value

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

// Lower-case letters, digits and single '-' between them.
std::string dns_text(std::string_view text) {
  std::string out;
  for (char c : text) {
    char lower = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (is_lower_alnum(lower)) out += lower;
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string trim_dashes(std::string text) {
  while (!text.empty() && text.back() == '-') text.pop_back();
  return text;
}

int digits(int number) { return number < 10 ? 1 : 1 + digits(number / 10); }

json metadata(const std::string& name, const KubernetesJobNames& names, const JobCreator& creator) {
  return {{"name", name},
          {"labels", {{spec::kRunLabel, names.run_label}, {spec::kJobLabel, names.job}}},
          {"annotations",
           {{spec::kRunIdAnnotation, creator.run_id},
            {spec::kCreatedByAnnotation, "dtrain " + creator.dtrain_version + ", run " + creator.run_id + ", " +
                                       creator.user + "@" + creator.host + " pid " + std::to_string(creator.pid) +
                                       "; deleted by dtrain when the run ends"}}}};
}

// Whole seconds, rounded up: a grace of 1.5 s must not become 1 s.
int64_t seconds_up(Millis duration) { return (duration.count() + 999) / 1000; }

}  // namespace

std::string KubernetesJobNames::pods_job() const {
  return kind == events::KubernetesKind::jobset ? job + "-" + kReplicatedJob + "-0" : job;
}

std::string KubernetesJobNames::selector() const {
  return std::string(spec::kRunLabel) + "=" + run_label + "," + spec::kJobLabel + "=" + job;
}

std::string label_value(std::string_view value) {
  std::string out;
  for (char c : value) out += (is_alnum(c) || c == '-' || c == '_' || c == '.') ? c : '-';
  size_t first = 0;
  while (first < out.size() && !is_alnum(out[first])) ++first;
  out = out.substr(first, kMaxLabel);
  while (!out.empty() && !is_alnum(out.back())) out.pop_back();
  return out;
}

KubernetesJobNames kubernetes_job_names(std::string_view run_id, int attempt, int pods, events::KubernetesKind kind) {
  // A pod's hostname is `<pods_job()>-<index>`, itself a DNS label: room for the highest index
  // (and, in a JobSet, for the child Job's `-workers-0`).
  const std::string suffix = attempt > 0 ? "-r" + std::to_string(attempt) : "";
  KubernetesJobNames names;
  names.kind = kind;
  const size_t child = names.pods_job().size();  // what pods_job() adds to the name
  const size_t room =
      kMaxLabel - 1 - static_cast<size_t>(digits(std::max(0, pods - 1))) - suffix.size() - child;
  std::string base = dns_text(run_id);
  // A Service name must start with a letter (DNS-1035); run ids may start with a digit.
  if (base.empty() || !(base[0] >= 'a' && base[0] <= 'z')) base = "dt-" + base;
  base = trim_dashes(base);
  if (base.size() > room) {
    // The start says which job it is; the hash of the whole id keeps two long ids apart.
    std::string hash = short_id(run_id);
    base = trim_dashes(base.substr(0, room - hash.size() - 1)) + "-" + hash;
  }
  names.job = base + suffix;
  names.service = names.job;  // Jobs and Services have names of their own kind
  names.run_label = label_value(run_id);
  return names;
}

json render_job(const spec::JobSpec& job, const KubernetesJobNames& names, const JobCreator& creator) {
  const spec::KubernetesJobTemplate& pods = *job.kubernetes.job;
  json container = {{"name", job.kubernetes.container.empty() ? "main" : job.kubernetes.container},
                    {"image", pods.image},
                    {"command", pods.command}};
  if (pods.gpus_per_pod > 0) container["resources"] = {{"limits", {{spec::kGpuResource, std::to_string(pods.gpus_per_pod)}}}};
  json tolerations = json::array();
  for (const auto& [key, after] : {std::pair{"node.kubernetes.io/not-ready", pods.not_ready_toleration},
                                   std::pair{"node.kubernetes.io/unreachable", pods.unreachable_toleration}}) {
    tolerations.push_back({{"key", key}, {"operator", "Exists"}, {"effect", "NoExecute"},
                           {"tolerationSeconds", seconds_up(after)}});
  }
  json pod_spec = {{"restartPolicy", "Never"},
                   {"subdomain", names.service},
                   // When Kubernetes deletes a pod (a drain, a preemption of its own), the
                   // processes in it get what a preemption of the run gives them to save.
                   {"terminationGracePeriodSeconds", std::max<int64_t>(1, seconds_up(job.preempt_grace))},
                   {"tolerations", tolerations},
                   {"containers", json::array({container})}};
  if (!pods.node_selector.empty()) pod_spec["nodeSelector"] = pods.node_selector;
  json template_metadata = metadata(names.job, names, creator);
  template_metadata.erase("name");  // the Job names its pods
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", metadata(names.job, names, creator)},
          {"spec",
           {{"completionMode", "Indexed"},
            {"completions", pods.pods},
            {"parallelism", pods.pods},
            // dtrain replaces lost hosts itself (spares, shrink). Per index, not per Job: with a
            // Job-wide backoffLimit 0 one lost pod fails the Job and Kubernetes deletes every other
            // pod of the run; with backoffLimitPerIndex 0 (Kubernetes 1.29+) only the lost pod's
            // index fails, gets no new pod (it would never be used), and the rest run on.
            // maxFailedIndexes = pods: the Job never ends the run's pods by itself.
            {"backoffLimitPerIndex", 0},
            {"maxFailedIndexes", pods.pods},
            {"template", {{"metadata", template_metadata}, {"spec", pod_spec}}}}}};
}

json render_jobset(const spec::JobSpec& job, const KubernetesJobNames& names, const JobCreator& creator) {
  json indexed = render_job(job, names, creator);
  json template_metadata = indexed["metadata"];
  template_metadata.erase("name");  // the JobSet names its child Job
  json replicated = {{"name", kReplicatedJob},
                     {"replicas", 1},
                     {"template", {{"metadata", template_metadata}, {"spec", indexed["spec"]}}}};
  return {{"apiVersion", std::string(kJobSetGroup) + "/" + kJobSetVersion},
          {"kind", "JobSet"},
          {"metadata", metadata(names.job, names, creator)},
          {"spec",
           {{"replicatedJobs", json::array({replicated})},
            {"network", {{"enableDNSHostnames", true}, {"subdomain", names.service}}},
            // A restart would delete and recreate every pod of the running run; dtrain replaces
            // lost pods itself (spares, shrink), as with the Job.
            {"failurePolicy", {{"maxRestarts", 0}}}}}};
}

json render_service(const spec::JobSpec&, const KubernetesJobNames& names, const JobCreator& creator) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", metadata(names.service, names, creator)},
          {"spec",
           {{"clusterIP", "None"},
            {"selector", {{spec::kRunLabel, names.run_label}, {spec::kJobLabel, names.job}}},
            // Ready or not: a pod's name resolves as soon as it has an IP (rendezvous comes
            // before readiness).
            {"publishNotReadyAddresses", true}}}};
}

}  // namespace dtrain::hosts
