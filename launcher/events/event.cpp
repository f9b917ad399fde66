#include "launcher/events/event.h"

#include <unordered_map>

#include "launcher/base/json_fields.h"

namespace dtrain::events {

using nlohmann::json;

namespace {

using Parser = Result<Event> (*)(const json&);

template <class T>
Result<Event> parse_as(const json& object) {
  Result<T> event = T::from_json(object);
  if (!event) return event.error();
  return Event(std::move(*event));
}

/// Every alternative of Event but the last (UnknownEvent), by its catalogue name.
template <size_t... Index>
std::unordered_map<std::string_view, Parser> make_parsers(std::index_sequence<Index...>) {
  return {{std::variant_alternative_t<Index, Event>::name, &parse_as<std::variant_alternative_t<Index, Event>>}...};
}

const std::unordered_map<std::string_view, Parser>& parsers() {
  static const auto table = make_parsers(std::make_index_sequence<std::variant_size_v<Event> - 1>());
  return table;
}

}  // namespace

Result<Event> parse_event(const json& object) {
  if (!object.is_object()) return Error::user("an event: expected a JSON object, got " + describe_json_value(object));
  const json* name = json_member(object, "ev");
  if (!name || !name->is_string()) {
    return Error::user(std::string("an event: \"ev\" expected a string, got ") +
                       (name ? describe_json_value(*name) : "nothing"));
  }
  const std::string& text = name->get_ref<const std::string&>();
  auto parser = parsers().find(text);
  if (parser == parsers().end()) {
    UnknownEvent unknown{text, object};
    unknown.raw.erase("ts");  // the log's, not the event's
    return Event(std::move(unknown));
  }
  return parser->second(object);
}

std::string_view event_name(const Event& event) {
  return std::visit([](const auto& typed) -> std::string_view { return typed.name; }, event);
}

json to_json(const Event& event) {
  return std::visit(
      [](const auto& typed) -> json {
        if constexpr (std::is_same_v<std::decay_t<decltype(typed)>, UnknownEvent>) {
          return typed.raw;
        } else {
          return typed.to_json();
        }
      },
      event);
}

}  // namespace dtrain::events
