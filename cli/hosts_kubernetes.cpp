#include "cli/hosts_kubernetes.h"

#include <cstdio>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/hosts/kubernetes_access.h"
#include "launcher/hosts/kubernetes_hosts.h"
#include "launcher/spec/kubernetes_pods.h"

namespace dtrain::cli {
namespace {

// Each kubectl call: the API server and any exec credential plugin, well within a minute.
constexpr Millis kKubectlTimeout{30'000};

/// One pod as `dtrain hosts` shows it.
struct PodRow {
  std::string name;
  std::string node;
  std::string ip;
  int slots = 0;
  std::string use;  ///< "host", "spare", or "left out: WHY"
};

struct KubernetesReport {
  std::vector<hosts::AccessCheck> access;
  hosts::CrdState jobset = hosts::CrdState::unknown;
  std::string jobset_detail;
  /// kubernetes.job: what a submit would create here (kind auto: as the CRD's state decides)
  events::KubernetesKind creates = events::KubernetesKind::job;
  std::string pods_note;  ///< instead of pods: kubernetes.job creates them at submit
  std::vector<PodRow> pods;
  std::vector<std::string> problems;
};

const spec::HostEntry* find_entry(const std::vector<spec::HostEntry>& entries, const std::string& name) {
  for (const spec::HostEntry& entry : entries) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

/// The selector's pods, in the order a submit would take them (hosts, spares), then the rest.
void read_pods(const spec::JobSpec& job, KubernetesReport& report) {
  if (job.kubernetes.job && job.kubernetes.selector.empty()) {
    report.pods_note = "kubernetes.job: dtrain creates " + std::to_string(job.kubernetes.job->pods) +
                       " pod(s) of image " + printable(job.kubernetes.job->image, 200) + " at submit, as " +
                       (report.creates == events::KubernetesKind::jobset ? "a JobSet" : "an Indexed Job");
    return;
  }
  Result<spec::PodList> pods = hosts::list_pods(job, job.kubernetes.selector, kKubectlTimeout);
  if (!pods) {
    report.problems.push_back(pods.error().message);
    return;
  }
  Result<spec::KubernetesHosts> taken = spec::hosts_from_pods(*pods, job.kubernetes, job.slots_per_host);
  if (!taken) report.problems.push_back(taken.error().message);
  auto row_of = [&](const spec::Pod& pod) {
    return PodRow{printable(pod.name, 64), printable(pod.node_name, 64), printable(pod.pod_ip, 64), 0, ""};
  };
  for (const auto* list : {taken ? &taken->hosts : nullptr, taken ? &taken->spares : nullptr}) {
    if (list == nullptr) continue;
    for (const spec::HostEntry& entry : *list) {
      for (const spec::Pod& pod : pods->pods) {
        if (pod.name != entry.name) continue;
        PodRow row = row_of(pod);
        row.slots = entry.slots;
        row.use = entry.spare || list == &taken->spares ? "spare" : "host";
        report.pods.push_back(std::move(row));
        break;
      }
    }
  }
  for (const spec::Pod& pod : pods->pods) {
    if (taken && (find_entry(taken->hosts, pod.name) || find_entry(taken->spares, pod.name))) continue;
    PodRow row = row_of(pod);
    std::string why = spec::pod_unusable_reason(pod);
    row.use = "left out: " + (why.empty() ? std::string("no pod can be a host (see below)") : why);
    report.pods.push_back(std::move(row));
  }
}

/// transport: kubectl with the pods named as hosts (a run's resolved spec.yaml): those pods, each
/// found and usable, or a problem naming it.
void read_named_pods(const spec::JobSpec& job, KubernetesReport& report) {
  Result<spec::PodList> pods = hosts::list_pods(job, "", kKubectlTimeout);
  if (!pods) {
    report.problems.push_back(pods.error().message);
    return;
  }
  for (const auto* list : {&job.hosts, &job.spares}) {
    for (const spec::HostEntry& entry : *list) {
      PodRow row{printable(entry.name, 64), "", "", entry.slots > 0 ? entry.slots : job.slots_per_host,
                 list == &job.spares ? "spare" : "host"};
      const spec::Pod* found = nullptr;
      for (const spec::Pod& pod : pods->pods) found = pod.name == entry.name ? &pod : found;
      std::string why = found ? spec::pod_unusable_reason(*found) : "is not in " + hosts::describe_namespace(job.kubernetes);
      if (found) {
        row.node = printable(found->node_name, 64);
        row.ip = printable(found->pod_ip, 64);
      }
      if (!why.empty()) {
        row.use = "CANNOT: " + why;
        report.problems.push_back("pod " + row.name + " " + why + "; fix: start it again, or drop it from hosts");
      }
      report.pods.push_back(std::move(row));
    }
  }
}

std::string dtrain_in_pods(const spec::JobSpec& job) {
  if (!job.ssh.remote_dtrain.empty()) return printable(job.ssh.remote_dtrain, 300) + " (ssh.remote_dtrain; the image holds it)";
  return "this binary, copied into each pod that lacks it at submit (ssh.remote_dtrain is unset)";
}

nlohmann::json to_json(const KubernetesReport& report, const spec::JobSpec& job) {
  nlohmann::json access = nlohmann::json::array();
  for (const hosts::AccessCheck& check : report.access) {
    access.push_back({{"verb", check.permission.verb}, {"resource", check.permission.resource},
                      {"subresource", check.permission.subresource}, {"needed_for", check.permission.needed_for},
                      {"allowed", check.verdict.answer == hosts::AccessAnswer::allowed},
                      {"detail", check.verdict.detail}});
  }
  nlohmann::json pods = nlohmann::json::array();
  for (const PodRow& row : report.pods) {
    pods.push_back({{"name", row.name}, {"node", row.node}, {"ip", row.ip}, {"slots", row.slots}, {"use", row.use}});
  }
  nlohmann::json document = {{"namespace", job.kubernetes.namespace_name}, {"context", job.kubernetes.context},
                              {"kubeconfig", job.kubernetes.kubeconfig}, {"access", access},
                              {"jobset_crd", hosts::to_string(report.jobset)}, {"pods", pods},
                              {"pods_note", report.pods_note}, {"dtrain", dtrain_in_pods(job)}};
  if (job.kubernetes.job && job.kubernetes.selector.empty()) document["creates"] = events::to_string(report.creates);
  return document;
}

void print_report(const KubernetesReport& report, const spec::JobSpec& job) {
  std::printf("kubernetes: %s%s\n", hosts::describe_namespace(job.kubernetes).c_str(),
              job.kubernetes.kubeconfig.empty() ? "" : (" (kubeconfig " + printable(job.kubernetes.kubeconfig, 300) + ")").c_str());
  std::printf("%-22s %-8s %s\n", "PERMISSION", "ACCESS", "NEEDED FOR");
  for (const hosts::AccessCheck& check : report.access) {
    std::printf("%-22s %-8s %s\n", hosts::describe(check.permission).c_str(), hosts::to_string(check.verdict.answer).c_str(),
                check.permission.needed_for.c_str());
  }
  std::printf("JobSet CRD (%s): %s%s (kubernetes.job.kind auto creates a JobSet where it is installed)\n",
              hosts::kJobSetResource, hosts::to_string(report.jobset).c_str(),
              report.jobset_detail.empty() ? "" : (": " + report.jobset_detail).c_str());
  std::printf("dtrain in the pods: %s\n\n", dtrain_in_pods(job).c_str());
  if (!report.pods_note.empty()) {
    std::printf("%s\n", report.pods_note.c_str());
    return;
  }
  std::printf("%-24s %-16s %-16s %-5s %s\n", "POD", "NODE", "IP", "SLOTS", "USE");
  for (const PodRow& row : report.pods) {
    std::printf("%-24s %-16s %-16s %-5s %s\n", row.name.c_str(), row.node.empty() ? "-" : row.node.c_str(),
                row.ip.empty() ? "-" : row.ip.c_str(), row.slots > 0 ? std::to_string(row.slots).c_str() : "-",
                row.use.c_str());
  }
}

}  // namespace

int check_kubernetes_hosts(const spec::JobSpec& job, const std::string& spec_path, bool json) {
  KubernetesReport report;
  // First: with kubernetes.job, the CRD decides what a submit creates, and so which rights it needs.
  report.jobset = hosts::check_jobset_crd(job, kKubectlTimeout, report.jobset_detail);
  std::string kind_problem;
  if (job.kubernetes.job && job.kubernetes.selector.empty()) {
    Result<hosts::JobKindChoice> choice = hosts::choose_job_kind(job.kubernetes, report.jobset, report.jobset_detail);
    if (choice) report.creates = choice->kind;
    else kind_problem = choice.error().message;
  }
  Result<std::vector<hosts::AccessCheck>> access = hosts::check_access(job, kKubectlTimeout, report.creates);
  if (!access) {
    if (json) {
      nlohmann::json document = {{"ok", false}, {"spec", spec_path}, {"error", access.error().message}};
      std::printf("%s\n", document.dump(2).c_str());
    } else {
      std::fprintf(stderr, "dtrain hosts: %s: %s\n", spec_path.c_str(), access.error().message.c_str());
    }
    return to_int(ExitCode::infra);
  }
  report.access = std::move(*access);
  for (const hosts::AccessCheck& check : report.access) {
    if (check.verdict.answer != hosts::AccessAnswer::allowed) {
      report.problems.push_back(hosts::missing_permission_message(check.permission, job.kubernetes));
    }
  }
  if (!kind_problem.empty()) report.problems.push_back(kind_problem);
  if (job.hosts.empty()) read_pods(job, report);
  else read_named_pods(job, report);
  bool ok = report.problems.empty();
  if (json) {
    nlohmann::json document = {{"ok", ok}, {"spec", spec_path}, {"kubernetes", to_json(report, job)},
                               {"problems", report.problems}};
    std::printf("%s\n", document.dump(2).c_str());
  } else {
    print_report(report, job);
    if (!ok) {
      std::fprintf(stderr, "\nthe job cannot run:\n");
      for (const std::string& problem : report.problems) std::fprintf(stderr, "  %s\n", problem.c_str());
    }
  }
  return ok ? to_int(ExitCode::ok) : to_int(ExitCode::infra);
}

}  // namespace dtrain::cli
