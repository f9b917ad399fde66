// Fuzz target: what kubectl prints about pods, as `hosts: kubernetes` reads it. The input is fed
// three ways: as `kubectl get pods -o json` (a PodList), as one watch event, and as a watch
// stream split by JsonObjectStream in two pieces (at the first newline). Invariants: a parsed
// list or event prints back (to_json) to JSON that parses to the same value; the hosts made of
// a list are its usable pods, each with a name, its IP and at least one slot, spares after
// hosts, or an error that says what is wrong; the stream yields only texts that start with '{'
// and end with '}'.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "launcher/base/json_fields.h"
#include "launcher/spec/kubernetes_pods.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

void check_list(std::string_view text) {
  Result<spec::PodList> list = spec::parse_pod_list(text);
  if (!list) {
    check(!list.error().message.empty(), "an error says what is wrong");
    return;
  }
  Result<spec::PodList> again = spec::parse_pod_list(json_compact(spec::to_json(*list)));
  check(again && *again == *list, "a pod list prints back to itself", std::string(text.substr(0, 200)));
  spec::KubernetesSettings kube;
  kube.enabled = true;
  kube.selector = "app=trainer";
  kube.spares = 1;
  Result<spec::KubernetesHosts> hosts = spec::hosts_from_pods(*list, kube, 2);
  if (!hosts) {
    check(!hosts.error().message.empty(), "an error says what is wrong");
    return;
  }
  check(!hosts->hosts.empty() && hosts->spares.size() == 1, "hosts and one spare");
  check(hosts->hosts.size() + hosts->spares.size() + hosts->left_out.size() == list->pods.size(),
        "every pod is a host, a spare or left out");
  for (const auto* group : {&hosts->hosts, &hosts->spares}) {
    for (const spec::HostEntry& host : *group) {
      check(!host.name.empty() && !host.address.empty() && host.slots >= 1, "a host has a name, an IP and slots");
    }
  }
}

void check_event(std::string_view text) {
  Result<spec::PodWatchEvent> event = spec::parse_pod_watch_event(text);
  if (!event) {
    check(!event.error().message.empty(), "an error says what is wrong");
    return;
  }
  Result<spec::PodWatchEvent> again = spec::parse_pod_watch_event(json_compact(spec::to_json(*event)));
  check(again && *again == *event, "a watch event prints back to itself", std::string(text.substr(0, 200)));
  (void)spec::pod_unusable_reason(event->pod);
}

void check_stream(std::string_view text) {
  auto [head, tail] = first_line(text);
  spec::JsonObjectStream stream;
  stream.append(head);
  for (int piece = 0; piece < 2; ++piece) {
    if (piece == 1) stream.append(tail);
    while (std::optional<std::string> object = stream.next()) {
      check(object->size() >= 2 && object->front() == '{' && object->back() == '}', "an object is {...}", *object);
      check_event(*object);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);
  check_list(text);
  check_event(text);
  check_stream(text);
  return 0;
}
