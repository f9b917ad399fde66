#pragma once
// What every events_*.cpp writes and reads an event's JSON with: named() and put_if() for
// to_json, EventFields for from_json. EventFields also reads state.json's parts
// (launcher/runlog/run_snapshot.cpp), which hold events (a recovery.completed, failure kinds):
// one reader of a file's structs, with the events' own types.

#include <climits>
#include <limits>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/json_fields.h"
#include "launcher/base/result.h"
#include "launcher/base/strings.h"
#include "launcher/events/event_catalogue.h"

namespace dtrain::events::detail {

using nlohmann::json;

/// An event: its name and its fields. "ts" is the log's to add.
inline json named(const char* name, json fields = json::object()) {
  fields["ev"] = name;
  return fields;
}

template <class T>
void put_if(json& event, const char* key, const std::optional<T>& value) {
  if (value) event[key] = *value;
}


/// Reads an event's fields into its struct through the one field reader (launcher/base):
/// read(key, field) keeps the field's default when the key is absent (or null) and records a
/// problem when it holds another type. Optional fields become set only when present.
class EventFields {
 public:
  EventFields(std::string what, const json& object) : fields_(std::move(what), object), object_(object) {}

  EventFields& read(std::string_view key, std::string& out) {
    if (auto value = fields_.optional_string(key, kNoLimit)) out = std::move(*value);
    return *this;
  }
  EventFields& read(std::string_view key, int& out) {
    if (auto value = fields_.optional_integer(key, INT_MIN, INT_MAX)) out = static_cast<int>(*value);
    return *this;
  }
  EventFields& read(std::string_view key, int64_t& out) {
    if (auto value = fields_.optional_integer(key)) out = *value;
    return *this;
  }
  EventFields& read(std::string_view key, uint64_t& out) {
    if (auto value = fields_.optional_integer(key, 0)) out = static_cast<uint64_t>(*value);
    return *this;
  }
  EventFields& read(std::string_view key, double& out) {
    if (auto value = fields_.optional_number(key)) out = *value;
    return *this;
  }
  EventFields& read(std::string_view key, bool& out) {
    if (auto value = fields_.optional_boolean(key)) out = *value;
    return *this;
  }
  EventFields& read(std::string_view key, std::vector<std::string>& out) {
    if (auto value = fields_.optional_string_array(key, kNoLimit, kNoLimit)) {
      out = std::move(*value);
    }
    return *this;
  }
  EventFields& read(std::string_view key, std::vector<int64_t>& out) {
    if (fields_.has(key)) out = fields_.optional_integer_array(key, kNoLimit);
    return *this;
  }
  EventFields& read(std::string_view key, std::vector<int>& out) {
    if (!fields_.has(key)) return *this;
    out.clear();
    for (int64_t item : fields_.optional_integer_array(key, kNoLimit)) {
      if (item < INT_MIN || item > INT_MAX) {
        fields_.fail_text(key, std::to_string(item) + " is out of range for a rank");
        break;
      }
      out.push_back(static_cast<int>(item));
    }
    return *this;
  }
  /// A failure kind by its catalogue name ("worker.exit"); another name is a problem naming them.
  EventFields& read(std::string_view key, FailureKind& out) {
    std::optional<std::string> name = fields_.optional_string(key, kNoLimit);
    if (!name) return *this;
    if (std::optional<FailureKind> kind = parse_failure_kind(*name)) {
      out = *kind;
      return *this;
    }
    std::string known;
    for (const FailureKindInfo& info : kFailureKinds) known += (known.empty() ? "" : ", ") + std::string(info.name);
    fields_.fail_text(key, "'" + printable(*name, 200) + "' is not a failure kind (" + known + ")");
    return *this;
  }
  /// What kubernetes.job created, by its Kubernetes kind ("Job", "JobSet").
  EventFields& read(std::string_view key, KubernetesKind& out) {
    std::optional<std::string> name = fields_.optional_string(key, kNoLimit);
    if (!name) return *this;
    if (std::optional<KubernetesKind> kind = parse_kubernetes_kind(*name)) out = *kind;
    else fields_.fail_text(key, "'" + printable(*name, 200) + "' is not what kubernetes.job creates (Job, JobSet)");
    return *this;
  }
  /// An object member as it is (a drill's report, per-phase timings).
  EventFields& read(std::string_view key, json& out) {
    if (const json* value = fields_.optional_object(key)) out = *value;
    return *this;
  }
  EventFields& read(std::string_view key, std::vector<json>& out) {
    if (const json* value = fields_.optional_array(key)) out = value->get<std::vector<json>>();
    return *this;
  }
  EventFields& read(std::string_view key, std::map<std::string, uint64_t>& out) {
    const json* value = fields_.optional_object(key);
    if (!value) return *this;
    for (const auto& [kind, count] : value->items()) {
      std::optional<int64_t> number = json_as_integer(count);
      if (!number || *number < 0) {
        fields_.fail(key, "expected counts (integers >= 0)", count);
        break;
      }
      out[kind] = static_cast<uint64_t>(*number);
    }
    return *this;
  }
  template <class T>
  EventFields& read(std::string_view key, std::optional<T>& out) {
    if (!fields_.has(key)) return *this;
    T value{};
    read(key, value);
    if (fields_.ok()) out = std::move(value);
    return *this;
  }
  /// An object member read by its own from_json (a FailureCause under "cause").
  template <class T>
  void read_nested(std::string_view key, std::optional<T>& out) {
    if (!fields_.has(key)) return;
    T value{};
    read_nested(key, value);
    if (fields_.ok()) out = std::move(value);
  }
  template <class T>
  void read_nested(std::string_view key, T& out) {
    const json* value = fields_.optional_object(key);
    if (!value) return;
    Result<T> nested = T::from_json(*value);
    if (nested) out = std::move(*nested);
    else fields_.fail_text(key, nested.error().message);
  }
  /// An array of objects, each read by T::from_json; a problem names its index ("ranks[3]").
  template <class T>
  void read_each(std::string_view key, std::vector<T>& out) {
    const json* list = fields_.optional_array(key);
    if (!list) return;
    std::vector<T> items;
    items.reserve(list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      Result<T> item = T::from_json((*list)[i]);
      if (!item) {
        fields_.fail_text(std::string(key) + "[" + std::to_string(i) + "]", item.error().message);
        return;
      }
      items.push_back(std::move(*item));
    }
    out = std::move(items);
  }

  const json& object() const { return object_; }

  /// `event` when every field read well, else the first problem.
  template <class T>
  Result<T> result(T event) const {
    if (!fields_.ok()) return fields_.error();
    return event;
  }

 private:
  // The line is parsed already, whole: a bound here would only drop a long traceback or a host
  // list of a large run, never save memory.
  static constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();
  FieldReader fields_;
  const json& object_;
};

}  // namespace dtrain::events::detail
