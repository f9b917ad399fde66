#include "launcher/spec/kubernetes_pods.h"

#include <algorithm>
#include <charconv>

#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/spec/spec_reader.h"

namespace dtrain::spec {
namespace {

using nlohmann::json;

constexpr size_t kMaxNameBytes = 253;     // a DNS subdomain: the longest Kubernetes object name
constexpr size_t kMaxLabelBytes = 4096;   // labels and annotations are far shorter in practice
constexpr size_t kMaxItems = 100'000;

// Nesting depth of `text` without parsing it, strings skipped: nlohmann's parser recurses.
bool nested_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

Result<json> parse_document(std::string_view text, const char* what) {
  if (text.size() > kMaxPodJsonBytes) {
    return Error::user(std::string(what) + ": " + std::to_string(text.size()) + " bytes, more than the " +
                       std::to_string(kMaxPodJsonBytes >> 20) + " MiB read");
  }
  if (!nested_within(text, kMaxPodJsonDepth)) {
    return Error::user(std::string(what) + ": nested deeper than " + std::to_string(kMaxPodJsonDepth) + " levels");
  }
  json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return Error::user(std::string(what) + ": not JSON");
  return document;
}

// A quantity such as "8" (a string in the API, a number from some writers); 0 when absent.
// Anything but a whole count of GPUs is an error: a fractional GPU cannot hold a rank.
int read_gpu_limit(FieldReader& reader, const json& limits) {
  const json* value = json_member(limits, kGpuResource);
  if (value == nullptr || value->is_null()) return 0;
  int64_t count = -1;
  if (auto number = json_as_integer(*value)) {
    count = *number;
  } else if (value->is_string()) {
    const std::string& text = value->get_ref<const std::string&>();
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (error != std::errc() || end != text.data() + text.size()) count = -1;
  }
  if (count < 0 || count > 1 << 20) {
    reader.fail("resources.limits." + std::string(kGpuResource), "a whole number of GPUs", *value);
    return 0;
  }
  return static_cast<int>(count);
}

void read_labels(FieldReader& reader, const json* labels, std::map<std::string, std::string>& out) {
  if (labels == nullptr) return;
  for (auto it = labels->begin(); it != labels->end() && out.size() < kMaxItems; ++it) {
    if (!it.value().is_string() || it.key().size() > kMaxLabelBytes ||
        it.value().get_ref<const std::string&>().size() > kMaxLabelBytes) {
      reader.fail("metadata.labels." + it.key().substr(0, 64), "a string label value", it.value());
      return;
    }
    out[it.key()] = it.value().get<std::string>();
  }
}

void read_containers(FieldReader& spec_reader, std::vector<PodContainer>& out) {
  const json* containers = spec_reader.optional_array("containers");
  if (containers == nullptr) return;
  for (const json& item : *containers) {
    if (out.size() >= kMaxItems) break;
    FieldReader container("spec.containers[" + std::to_string(out.size()) + "]", item);
    PodContainer parsed;
    parsed.name = container.string("name", kMaxNameBytes);
    if (const json* resources = container.optional_object("resources")) {
      FieldReader resource_reader("resources", *resources);
      if (const json* limits = resource_reader.optional_object("limits")) parsed.gpu_limit = read_gpu_limit(container, *limits);
      if (!resource_reader.ok()) container.fail_text("resources", resource_reader.error().message);
    }
    if (!container.ok()) {
      spec_reader.fail_text("containers", container.error().message);
      return;
    }
    out.push_back(std::move(parsed));
  }
}

void read_conditions(FieldReader& status_reader, Pod& pod) {
  const json* conditions = status_reader.optional_array("conditions");
  if (conditions == nullptr) return;
  for (const json& item : *conditions) {
    FieldReader condition("status.conditions[]", item);
    std::optional<std::string> type = condition.optional_string("type", kMaxNameBytes);
    std::optional<std::string> status = condition.optional_string("status", 16);
    std::optional<std::string> reason = condition.optional_string("reason", kMaxLabelBytes);
    std::optional<std::string> message = condition.optional_string("message", kMaxLabelBytes);
    if (!condition.ok()) {
      status_reader.fail_text("conditions", condition.error().message);
      return;
    }
    if (type != "Ready") continue;
    pod.ready = status == "True";
    pod.ready_reason = reason.value_or("");
    if (message && !message->empty()) pod.ready_reason += (pod.ready_reason.empty() ? "" : ": ") + *message;
  }
}

Result<Pod> read_pod(const json& object) {
  Pod pod;
  FieldReader top("pod", object);
  const json* metadata = top.object("metadata");
  if (!top.ok()) return top.error();
  FieldReader meta("pod metadata", *metadata);
  pod.name = meta.string("name", kMaxNameBytes);
  read_labels(meta, meta.optional_object("labels"), pod.labels);
  pod.deleting = meta.has("deletionTimestamp");
  if (!meta.ok()) return meta.error();
  if (pod.name.empty()) return Error::user("pod metadata.name: empty");
  FieldReader error_context("pod " + printable(pod.name, 64), object);
  if (const json* spec = error_context.optional_object("spec")) {
    FieldReader spec_reader("pod " + printable(pod.name, 64) + " spec", *spec);
    pod.node_name = spec_reader.optional_string("nodeName", kMaxNameBytes).value_or("");
    read_containers(spec_reader, pod.containers);
    if (!spec_reader.ok()) return spec_reader.error();
  }
  if (const json* status = error_context.optional_object("status")) {
    FieldReader status_reader("pod " + printable(pod.name, 64) + " status", *status);
    pod.phase = status_reader.optional_string("phase", 64).value_or("");
    pod.pod_ip = status_reader.optional_string("podIP", 64).value_or("");
    pod.host_ip = status_reader.optional_string("hostIP", 64).value_or("");
    read_conditions(status_reader, pod);
    if (!status_reader.ok()) return status_reader.error();
  }
  if (!error_context.ok()) return error_context.error();
  return pod;
}

}  // namespace

std::optional<int> Pod::completion_index() const {
  auto label = labels.find(kCompletionIndexLabel);
  if (label == labels.end()) return std::nullopt;
  int index = -1;
  const std::string& text = label->second;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (error != std::errc() || end != text.data() + text.size() || index < 0) return std::nullopt;
  return index;
}

Result<PodList> parse_pod_list(std::string_view text) {
  Result<json> document = parse_document(text, "kubectl get pods");
  if (!document) return document.error();
  PodList list;
  FieldReader top("kubectl get pods", *document);
  if (!top.ok()) return top.error();
  if (json_string(*document, "kind") == "Pod") {  // `get pod NAME -o json`
    Result<Pod> pod = read_pod(*document);
    if (!pod) return pod.error();
    list.pods.push_back(std::move(pod).value());
    return list;
  }
  const json* items = top.optional_array("items");
  if (!top.ok()) return top.error();
  if (items == nullptr) return Error::user("kubectl get pods: neither a PodList (items) nor a Pod");
  for (const json& item : *items) {
    if (list.pods.size() >= kMaxItems) return Error::user("kubectl get pods: more than 100000 pods");
    Result<Pod> pod = read_pod(item);
    if (!pod) return pod.error();
    list.pods.push_back(std::move(pod).value());
  }
  return list;
}

Result<PodWatchEvent> parse_pod_watch_event(std::string_view text) {
  Result<json> document = parse_document(text, "pod watch event");
  if (!document) return document.error();
  FieldReader reader("pod watch event", *document);
  std::string type = reader.string("type", 32);
  const json* object = reader.object("object");
  if (!reader.ok()) return reader.error();
  PodWatchEvent event;
  if (type == "ERROR") {
    event.type = PodWatchEvent::Type::error;
    event.error = printable(json_string(*object, "message", "the API server ended the watch"), 512);
    return event;
  }
  if (type == "ADDED") event.type = PodWatchEvent::Type::added;
  else if (type == "MODIFIED") event.type = PodWatchEvent::Type::modified;
  else if (type == "DELETED") event.type = PodWatchEvent::Type::deleted;
  else return Error::user("pod watch event: type " + single_quoted(printable(type, 32)) + " is none of ADDED, MODIFIED, DELETED, ERROR");
  Result<Pod> pod = read_pod(*object);
  if (!pod) return pod.error();
  event.pod = std::move(pod).value();
  return event;
}

json to_json(const Pod& pod) {
  json metadata = {{"name", pod.name}};
  if (!pod.labels.empty()) metadata["labels"] = pod.labels;
  if (pod.deleting) metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  json containers = json::array();
  for (const PodContainer& container : pod.containers) {
    json item = {{"name", container.name}};
    if (container.gpu_limit > 0) item["resources"]["limits"][kGpuResource] = std::to_string(container.gpu_limit);
    containers.push_back(std::move(item));
  }
  json spec = {{"containers", std::move(containers)}};
  if (!pod.node_name.empty()) spec["nodeName"] = pod.node_name;
  json status = json::object();
  if (!pod.phase.empty()) status["phase"] = pod.phase;
  if (!pod.pod_ip.empty()) status["podIP"] = pod.pod_ip;
  if (!pod.host_ip.empty()) status["hostIP"] = pod.host_ip;
  if (pod.ready) {
    json condition = {{"type", "Ready"}, {"status", *pod.ready ? "True" : "False"}};
    if (!pod.ready_reason.empty()) condition["reason"] = pod.ready_reason;
    status["conditions"] = json::array({std::move(condition)});
  }
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", std::move(metadata)}, {"spec", std::move(spec)},
          {"status", std::move(status)}};
}

json to_json(const PodList& list) {
  json items = json::array();
  for (const Pod& pod : list.pods) items.push_back(to_json(pod));
  return {{"apiVersion", "v1"}, {"kind", "List"}, {"items", std::move(items)}};
}

json to_json(const PodWatchEvent& event) {
  switch (event.type) {
    case PodWatchEvent::Type::error:
      return {{"type", "ERROR"}, {"object", {{"kind", "Status"}, {"message", event.error}}}};
    case PodWatchEvent::Type::added: return {{"type", "ADDED"}, {"object", to_json(event.pod)}};
    case PodWatchEvent::Type::modified: return {{"type", "MODIFIED"}, {"object", to_json(event.pod)}};
    case PodWatchEvent::Type::deleted: return {{"type", "DELETED"}, {"object", to_json(event.pod)}};
  }
  return {};
}

void JsonObjectStream::append(std::string_view bytes) {
  if (broken()) return;
  buffer_.append(bytes);
}

std::optional<std::string> JsonObjectStream::next() {
  while (!broken() && scanned_ < buffer_.size()) {
    char c = buffer_[scanned_++];
    if (depth_ == 0) {
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        buffer_.erase(0, scanned_);  // whitespace between objects
        scanned_ = 0;
        continue;
      }
      if (c != '{') {
        problem_ = "kubectl's watch output holds " + single_quoted(printable(buffer_.substr(scanned_ - 1, 40), 40)) +
                   " between objects";
        return std::nullopt;
      }
    }
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      if (++depth_ > kMaxPodJsonDepth) problem_ = "a watch event nested deeper than " + std::to_string(kMaxPodJsonDepth) + " levels";
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        std::string object = buffer_.substr(0, scanned_);
        buffer_.erase(0, scanned_);
        scanned_ = 0;
        return object;
      }
    }
  }
  if (!broken() && buffer_.size() > kMaxPodJsonBytes) {
    problem_ = "a watch event over " + std::to_string(kMaxPodJsonBytes >> 20) + " MiB";
  }
  return std::nullopt;
}

std::string pod_unusable_reason(const Pod& pod) {
  if (pod.deleting) return "is being deleted";
  if (pod.phase != "Running") return "is " + (pod.phase.empty() ? std::string("in no phase yet") : pod.phase);
  if (pod.ready && !*pod.ready) {
    return "is not Ready" + (pod.ready_reason.empty() ? std::string() : " (" + pod.ready_reason + ")");
  }
  if (pod.pod_ip.empty()) return "has no IP yet";
  return "";
}

std::optional<std::string> pod_loss_reason(const PodWatchEvent& event) {
  if (event.type == PodWatchEvent::Type::error) return std::nullopt;
  const std::string name = "pod " + printable(event.pod.name, 64);
  if (event.type == PodWatchEvent::Type::deleted) return name + " was deleted";
  if (event.pod.phase == "Failed" || event.pod.phase == "Succeeded") return name + " ended: " + event.pod.phase;
  std::string reason = pod_unusable_reason(event.pod);
  if (reason.empty()) return std::nullopt;
  return name + " " + reason;
}

std::string describe_pod_source(const KubernetesSettings& kube) {
  std::string where = kube.namespace_name.empty() ? "the context's namespace" : "namespace " + single_quoted(kube.namespace_name);
  if (!kube.selector.empty()) where += ", selector " + single_quoted(kube.selector);
  return where;
}

Result<KubernetesHosts> hosts_from_pods(const PodList& list, const KubernetesSettings& kube, int slots_per_host) {
  const std::string where = describe_pod_source(kube);
  std::vector<const Pod*> usable;
  KubernetesHosts result;
  for (const Pod& pod : list.pods) {
    std::string reason = pod_unusable_reason(pod);
    if (reason.empty()) usable.push_back(&pod);
    else result.left_out.push_back(printable(pod.name, 64) + " " + reason);
  }
  if (usable.empty()) {
    std::string message = list.pods.empty() ? "no pod matches " + where + "; check the selector with kubectl get pods -l"
                                            : "no pod of " + where + " is Running and Ready (" + join(result.left_out, ", ") +
                                                  "); wait until they run, or fix what keeps them from it";
    return Error::user(message);
  }
  // Completion index first (an Indexed Job's order), then names: the same pods make the same
  // hosts in the same order at every submit.
  std::sort(usable.begin(), usable.end(), [](const Pod* a, const Pod* b) {
    auto ia = a->completion_index(), ib = b->completion_index();
    if (ia.has_value() != ib.has_value()) return ia.has_value();
    if (ia && *ia != *ib) return *ia < *ib;
    return a->name < b->name;
  });
  if (static_cast<int>(usable.size()) <= kube.spares) {
    return Error::user(std::to_string(usable.size()) + " usable pod(s) of " + where + " leave none to train on beside " +
                       std::to_string(kube.spares) + " spare(s); lower kubernetes.spares or add pods");
  }
  const size_t first_spare = usable.size() - static_cast<size_t>(kube.spares);
  for (size_t i = 0; i < usable.size(); ++i) {
    const Pod& pod = *usable[i];
    const PodContainer* container = pod.containers.empty() ? nullptr : &pod.containers.front();
    if (!kube.container.empty()) {
      auto named = std::find_if(pod.containers.begin(), pod.containers.end(),
                                [&](const PodContainer& c) { return c.name == kube.container; });
      container = named == pod.containers.end() ? nullptr : &*named;
    }
    if (container == nullptr) {
      std::vector<std::string> names;
      for (const PodContainer& c : pod.containers) names.push_back(printable(c.name, 64));
      return Error::user("pod " + printable(pod.name, 64) + " of " + where + " has no container " +
                         single_quoted(kube.container.empty() ? "(none)" : kube.container) + " (it has: " +
                         (names.empty() ? "none" : join(names, ", ")) + "); set kubernetes.container to one of them");
    }
    HostEntry host;
    host.name = pod.name;
    host.address = pod.pod_ip;
    host.slots = container->gpu_limit > 0 ? container->gpu_limit : slots_per_host;
    host.spare = i >= first_spare;
    (host.spare ? result.spares : result.hosts).push_back(std::move(host));
  }
  return result;
}

}  // namespace dtrain::spec
