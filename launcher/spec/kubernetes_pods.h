#pragma once
// `hosts: kubernetes`: the pods kubectl shows, typed at the boundary, and the hosts they make.
// kubectl's output is untrusted input (an API server, a proxy or a plugin may write anything):
// it is parsed here, once, into Pod structs that say only what dtrain reads (the contract with
// the emulated API server is /work/notes/k8s_contract.md, docs/kubernetes.md for users); no
// other code reads a field of a pod by name. Like slurm_allocation.h for `hosts: slurm`.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::spec {

/// The resource name of a GPU in a pod's limits.
inline constexpr const char* kGpuResource = "nvidia.com/gpu";
/// The label an Indexed Job puts on each pod: its completion index (the pods' order).
inline constexpr const char* kCompletionIndexLabel = "batch.kubernetes.io/job-completion-index";
/// The label dtrain puts on everything it creates for a run (value: the run id).
inline constexpr const char* kRunLabel = "dtrain.io/run";
/// kubernetes.job: the label that tells one attempt's pods (submit, each resume) from another's
/// of the same run (value: the Job's name), and the annotations of what dtrain creates: the
/// whole run id (a label value may have to shorten it) and who made it.
inline constexpr const char* kJobLabel = "dtrain.io/job";
inline constexpr const char* kRunIdAnnotation = "dtrain.io/run-id";
inline constexpr const char* kCreatedByAnnotation = "dtrain.io/created-by";

struct PodContainer {
  std::string name;
  int gpu_limit = 0;  ///< resources.limits["nvidia.com/gpu"]; 0 when absent
  bool operator==(const PodContainer&) const = default;
};

/// One pod: what dtrain reads of metadata, spec and status.
struct Pod {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string node_name;                  ///< spec.nodeName ("" while unscheduled)
  std::vector<PodContainer> containers;
  std::string phase;                      ///< Pending, Running, Succeeded, Failed, Unknown
  std::string pod_ip;                     ///< status.podIP ("" until it has one)
  std::string host_ip;                    ///< status.hostIP
  std::optional<bool> ready;              ///< the Ready condition; none when not reported
  std::string ready_reason;               ///< its reason or message, for "why is it not ready"
  bool deleting = false;                  ///< metadata.deletionTimestamp is set

  /// The completion index label as a number, when the pod belongs to an Indexed Job.
  std::optional<int> completion_index() const;
  bool operator==(const Pod&) const = default;
};

struct PodList {
  std::vector<Pod> pods;
  bool operator==(const PodList&) const = default;
};

/// One line of `kubectl get pods -w -o json --output-watch-events`.
struct PodWatchEvent {
  enum class Type { added, modified, deleted, error };
  Type type = Type::added;
  Pod pod;                 ///< the pod (not for error)
  std::string error;       ///< type error: the Status message the API server sent
  bool operator==(const PodWatchEvent&) const = default;
};

/// The largest kubectl output read as one JSON document (a list of thousands of pods fits).
inline constexpr size_t kMaxPodJsonBytes = 64u << 20;
/// Deeper nesting is refused before parsing (a pod is about 10 levels deep).
inline constexpr int kMaxPodJsonDepth = 64;

/// `kubectl get pods -o json` (a v1 PodList; a single Pod is read as a list of one). Never
/// throws; malformed input is an Error that says which field.
Result<PodList> parse_pod_list(std::string_view text);
/// One watch event {"type": ..., "object": Pod | Status}.
Result<PodWatchEvent> parse_pod_watch_event(std::string_view text);

/// The inverse of the parsers, for tests and fuzz invariants: parse(to_json(x)) == x.
nlohmann::json to_json(const Pod& pod);
nlohmann::json to_json(const PodList& list);
nlohmann::json to_json(const PodWatchEvent& event);

/// Splits kubectl's watch output, a stream of JSON objects one after another (pretty-printed
/// over many lines), into one text per object, without parsing. An object over
/// kMaxPodJsonBytes or nested deeper than kMaxPodJsonDepth, or bytes outside any object, make
/// the stream broken() for good: a watch that cannot be read is reported, not guessed at.
class JsonObjectStream {
 public:
  void append(std::string_view bytes);
  /// The next complete object's text, if one is complete.
  std::optional<std::string> next();
  bool broken() const { return !problem_.empty(); }
  const std::string& problem() const { return problem_; }

 private:
  std::string buffer_;
  size_t scanned_ = 0;     ///< buffer_[0, scanned_) is scanned; the object starts at 0
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  std::string problem_;
};

/// "" when `pod` can be a host now; else why not, in words ("is Pending", "is being deleted",
/// "is not Ready (node NotReady)", "has no IP yet").
std::string pod_unusable_reason(const Pod& pod);

/// Why a watch event means the pod is lost as a host, in words ("pod x was deleted", "pod x is
/// not Ready (node NotReady)", "pod x ended: Failed"); none when it is still usable. The same
/// rule as pod_unusable_reason, for a pod that was a host: an ERROR event is no loss (the watch
/// itself failed; its owner restarts it).
std::optional<std::string> pod_loss_reason(const PodWatchEvent& event);

/// Where pods came from, for messages: "namespace 'ml', selector 'app=trainer'".
std::string describe_pod_source(const KubernetesSettings& kube);

struct KubernetesHosts {
  std::vector<HostEntry> hosts;
  std::vector<HostEntry> spares;
  /// Pods that matched but cannot be hosts, each with why ("trainer-3 is Pending").
  std::vector<std::string> left_out;
};

/// The hosts of `pods`: usable pods in completion-index order (then by name), the last
/// kube.spares of them spares; name = pod name, address = pod IP, slots = the container's GPU
/// limit, else `slots_per_host`. No usable pod, too few for the spares, or a pod without the
/// named container is an Error naming the namespace and selector and saying what to do.
Result<KubernetesHosts> hosts_from_pods(const PodList& pods, const KubernetesSettings& kube, int slots_per_host);

}  // namespace dtrain::spec
