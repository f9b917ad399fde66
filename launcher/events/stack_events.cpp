// to_json and from_json of the software-stack events (stack_events.h), and their text.

#include "launcher/events/stack_events.h"

#include <algorithm>

#include "launcher/base/strings.h"
#include "launcher/events/event_fields.h"

namespace dtrain::events {

using nlohmann::json;
using detail::EventFields;
using detail::named;

json StackItem::to_json() const { return {{"item", item}, {"value", value}}; }

Result<StackItem> StackItem::from_json(const json& object) {
  EventFields fields("stack item", object);
  StackItem out;
  fields.read("item", out.item).read("value", out.value);
  return fields.result(std::move(out));
}

const std::string* HostStack::value_of(const std::string& item) const {
  for (const StackItem& entry : items) {
    if (entry.item == item) return &entry.value;
  }
  return nullptr;
}

json HostStack::to_json() const {
  json list = json::array();
  for (const StackItem& item : items) list.push_back(item.to_json());
  json out = named(name, {{"host", host}, {"items", std::move(list)}, {"ms", ms}});
  if (!notes.empty()) out["notes"] = notes;
  return out;
}

Result<HostStack> HostStack::from_json(const json& object) {
  EventFields fields(name, object);
  HostStack event;
  fields.read("host", event.host).read("ms", event.ms).read("notes", event.notes);
  fields.read_each("items", event.items);
  return fields.result(std::move(event));
}

json StackDifference::to_json() const {
  return {{"host", host}, {"item", item}, {"value", value}, {"majority", majority}, {"majority_hosts", majority_hosts}};
}

Result<StackDifference> StackDifference::from_json(const json& object) {
  EventFields fields("stack difference", object);
  StackDifference out;
  fields.read("host", out.host).read("item", out.item).read("value", out.value).read("majority", out.majority)
      .read("majority_hosts", out.majority_hosts);
  return fields.result(std::move(out));
}

std::vector<std::string> StackConsistency::differing_hosts() const {
  std::vector<std::string> hosts_named;
  for (const StackDifference& difference : differences) {
    if (std::find(hosts_named.begin(), hosts_named.end(), difference.host) == hosts_named.end()) {
      hosts_named.push_back(difference.host);
    }
  }
  return hosts_named;
}

std::string StackConsistency::text() const {
  std::string how = " (consistency " + mode + ")";
  if (differences.empty()) {
    std::string out = "same on " + std::to_string(hosts.size()) + " host" + (hosts.size() == 1 ? "" : "s");
    if (!unknown.empty()) out += "; " + std::to_string(unknown.size()) + " item(s) could not be read";
    return out + how;
  }
  std::string out;
  std::string last_host;
  for (const StackDifference& difference : differences) {
    if (difference.host != last_host) {
      out += (out.empty() ? "" : "; ") + difference.host + " differs: ";
      last_host = difference.host;
    } else {
      out += ", ";
    }
    out += difference.item + " " + difference.value + " (" +
           (difference.majority.empty() ? std::string("no majority") : "majority " + difference.majority) + ")";
  }
  return out + " - " + action + how;
}

json StackConsistency::to_json() const {
  json list = json::array();
  for (const StackDifference& difference : differences) list.push_back(difference.to_json());
  json out = named(name, {{"mode", mode}, {"verdict", verdict}, {"action", action}, {"hosts", hosts},
                          {"differences", std::move(list)}, {"detail", detail}});
  if (!unknown.empty()) out["unknown"] = unknown;
  return out;
}

Result<StackConsistency> StackConsistency::from_json(const json& object) {
  EventFields fields(name, object);
  StackConsistency event;
  fields.read("mode", event.mode).read("verdict", event.verdict).read("action", event.action)
      .read("hosts", event.hosts).read("unknown", event.unknown).read("detail", event.detail);
  fields.read_each("differences", event.differences);
  return fields.result(std::move(event));
}

std::vector<std::string> stack_difference_table(const std::vector<StackDifference>& differences) {
  std::vector<std::vector<std::string>> rows{{"HOST", "ITEM", "THIS HOST", "MAJORITY"}};
  for (const StackDifference& difference : differences) {
    std::string majority = difference.majority.empty()
                               ? std::string("(no majority: hosts disagree)")
                               : difference.majority + " (" + std::to_string(difference.majority_hosts) + " host" +
                                     (difference.majority_hosts == 1 ? "" : "s") + ")";
    rows.push_back({difference.host, difference.item, difference.value, majority});
  }
  std::vector<size_t> widths(4, 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::vector<std::string> lines;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace dtrain::events
