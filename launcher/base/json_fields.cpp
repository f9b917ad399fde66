#include "launcher/base/json_fields.h"

#include <cmath>

#include "launcher/base/strings.h"

namespace dtrain {

using nlohmann::json;

const json* json_member(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

std::optional<int64_t> json_as_integer(const json& value) {
  if (value.is_number_unsigned()) {
    uint64_t number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(number);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    double number = value.get<double>();
    // Range first: converting a double outside int64's range is undefined behaviour (found by
    // fuzz/control_request: a reply's "generation" of 9.18e20). NaN fails the range test too.
    if (!(number >= -9.0e18 && number <= 9.0e18)) return std::nullopt;
    if (std::trunc(number) == number) return static_cast<int64_t>(number);
  }
  return std::nullopt;
}

std::optional<int64_t> json_int(const json& object, std::string_view key) {
  const json* member = json_member(object, key);
  return member ? json_as_integer(*member) : std::nullopt;
}

std::optional<double> json_number(const json& object, std::string_view key) {
  const json* member = json_member(object, key);
  if (!member || !member->is_number()) return std::nullopt;
  return member->get<double>();
}

std::string json_string(const json& object, std::string_view key, std::string_view fallback) {
  const json* member = json_member(object, key);
  if (!member || !member->is_string()) return std::string(fallback);
  return member->get<std::string>();
}

bool json_bool(const json& object, std::string_view key, bool fallback) {
  const json* member = json_member(object, key);
  if (!member || !member->is_boolean()) return fallback;
  return member->get<bool>();
}

std::string json_compact(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string describe_json_value(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case json::value_t::string: return "a string \"" + printable(value.get_ref<const std::string&>(), 40) + "\"";
    case json::value_t::array: return "an array of " + std::to_string(value.size());
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return json_compact(value);
    default: return value.type_name();
  }
}

bool FieldReader::has(std::string_view key) const {
  const json* value = json_member(object_, key);
  return value != nullptr && !value->is_null();
}

const json* FieldReader::optional_value(std::string_view key) const {
  return has(key) ? json_member(object_, key) : nullptr;
}

std::string FieldReader::where(std::string_view key) const {
  if (key.empty() || what_.empty()) return what_ + std::string(key);
  return what_ + "." + std::string(key);
}

void FieldReader::fail(std::string_view key, std::string_view expected, const json& got) {
  fail_text(key, std::string(expected) + ", got " + describe_json_value(got));
}

void FieldReader::fail_text(std::string_view key, std::string text) {
  if (problem_) return;  // the first problem is the one to report
  std::string at = where(key);
  problem_ = at.empty() ? std::move(text) : at + ": " + text;
}

std::optional<int64_t> FieldReader::optional_integer(std::string_view key, int64_t min, int64_t max) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return std::nullopt;
  std::optional<int64_t> number = json_as_integer(*value);
  if (!number) {
    fail(key, "expected an integer", *value);
    return std::nullopt;
  }
  if (*number < min || *number > max) {
    fail_text(key, std::to_string(*number) + " is out of range [" + std::to_string(min) + ", " +
                       std::to_string(max) + "]");
    return std::nullopt;
  }
  return number;
}

int64_t FieldReader::integer(std::string_view key, int64_t min, int64_t max) {
  if (!json_member(object_, key)) {
    fail_text(key, "missing (expected an integer)");
    return 0;
  }
  const json* value = json_member(object_, key);
  if (value->is_null()) {
    fail(key, "expected an integer", *value);
    return 0;
  }
  return optional_integer(key, min, max).value_or(0);
}

std::optional<double> FieldReader::optional_number(std::string_view key) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_number()) {
    fail(key, "expected a number", *value);
    return std::nullopt;
  }
  double number = value->get<double>();
  if (!std::isfinite(number)) {
    fail(key, "expected a finite number", *value);
    return std::nullopt;
  }
  return number;
}

double FieldReader::number(std::string_view key) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) {
    if (value) fail(key, "expected a number", *value);
    else fail_text(key, "missing (expected a number)");
    return 0;
  }
  return optional_number(key).value_or(0);
}

std::optional<std::string> FieldReader::optional_string(std::string_view key, size_t max_bytes) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_string()) {
    fail(key, "expected a string", *value);
    return std::nullopt;
  }
  const std::string& text = value->get_ref<const std::string&>();
  if (text.size() > max_bytes) {
    fail_text(key, "string of " + std::to_string(text.size()) + " bytes exceeds the " +
                       std::to_string(max_bytes) + "-byte limit");
    return std::nullopt;
  }
  return text;
}

std::string FieldReader::string(std::string_view key, size_t max_bytes) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) {
    if (value) fail(key, "expected a string", *value);
    else fail_text(key, "missing (expected a string)");
    return {};
  }
  return optional_string(key, max_bytes).value_or(std::string());
}

std::optional<bool> FieldReader::optional_boolean(std::string_view key) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_boolean()) {
    fail(key, "expected true or false", *value);
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<std::vector<std::string>> FieldReader::optional_string_array(std::string_view key, size_t max_items,
                                                                           size_t max_bytes) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_array()) {
    fail(key, "expected an array of strings", *value);
    return std::nullopt;
  }
  if (value->size() > max_items) {
    fail_text(key, "array of " + std::to_string(value->size()) + " items exceeds the limit of " +
                       std::to_string(max_items));
    return std::nullopt;
  }
  std::vector<std::string> items;
  items.reserve(value->size());
  for (const json& item : *value) {
    if (!item.is_string()) {
      fail(key, "expected an array of strings, one item is not", item);
      return std::nullopt;
    }
    if (item.get_ref<const std::string&>().size() > max_bytes) {
      fail_text(key, "an item exceeds the " + std::to_string(max_bytes) + "-byte limit");
      return std::nullopt;
    }
    items.push_back(item.get<std::string>());
  }
  return items;
}

std::vector<std::string> FieldReader::string_array(std::string_view key, size_t max_items, size_t max_bytes) {
  if (!json_member(object_, key)) {
    fail_text(key, "missing (expected an array of strings)");
    return {};
  }
  std::optional<std::vector<std::string>> items = optional_string_array(key, max_items, max_bytes);
  if (!items && ok()) fail(key, "expected an array of strings", *json_member(object_, key));
  return items.value_or(std::vector<std::string>());
}

std::vector<int64_t> FieldReader::optional_integer_array(std::string_view key, size_t max_items) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return {};
  if (!value->is_array() || value->size() > max_items) {
    fail(key, "expected an array of at most " + std::to_string(max_items) + " integers", *value);
    return {};
  }
  std::vector<int64_t> items;
  for (const json& item : *value) {
    std::optional<int64_t> number = json_as_integer(item);
    if (!number) {
      fail(key, "expected an array of integers, one item is not", item);
      return {};
    }
    items.push_back(*number);
  }
  return items;
}

const json* FieldReader::optional_object(std::string_view key) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return nullptr;
  if (!value->is_object()) {
    fail(key, "expected an object", *value);
    return nullptr;
  }
  return value;
}

const json* FieldReader::object(std::string_view key) {
  if (!json_member(object_, key)) {
    fail_text(key, "missing (expected an object)");
    return nullptr;
  }
  const json* value = optional_object(key);
  if (!value && ok()) fail(key, "expected an object", *json_member(object_, key));
  return value;
}

const json* FieldReader::optional_array(std::string_view key) {
  const json* value = json_member(object_, key);
  if (!value || value->is_null()) return nullptr;
  if (!value->is_array()) {
    fail(key, "expected an array", *value);
    return nullptr;
  }
  return value;
}

}  // namespace dtrain
