#include "launcher/proto/field_reader.h"

#include "launcher/base/strings.h"

namespace dtrain::proto {

namespace {

std::optional<int64_t> as_integer(const nlohmann::json& value) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    double number = value.get<double>();
    // Whole-valued floats (1e3) are accepted: some JSON writers emit every number as a double.
    if (std::isfinite(number) && std::trunc(number) == number && number >= -9.0e18 && number <= 9.0e18) {
      return static_cast<int64_t>(number);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string describe_json_value(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::string: return "a string \"" + printable(value.get_ref<const std::string&>(), 40) + "\"";
    case nlohmann::json::value_t::array: return "an array of " + std::to_string(value.size());
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    default: return value.type_name();
  }
}

const nlohmann::json* FieldReader::member(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto found = object_.find(key);
  return found == object_.end() ? nullptr : &*found;
}

std::string FieldReader::where(std::string_view key) const {
  return key.empty() ? what_ : what_ + "." + std::string(key);
}

void FieldReader::fail(std::string_view key, std::string_view expected, const nlohmann::json& got) {
  if (problem_) return;  // the first problem is the one to report
  problem_ = where(key) + ": " + std::string(expected) + ", got " + describe_json_value(got);
}

void FieldReader::fail_text(std::string_view key, std::string text) {
  if (!problem_) problem_ = where(key) + ": " + text;
}

std::optional<int64_t> FieldReader::optional_integer(std::string_view key, int64_t min, int64_t max) {
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) return std::nullopt;
  std::optional<int64_t> number = as_integer(*value);
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
  if (!member(key)) {
    fail_text(key, "missing (expected an integer)");
    return 0;
  }
  const nlohmann::json* value = member(key);
  if (value->is_null()) {
    fail(key, "expected an integer", *value);
    return 0;
  }
  return optional_integer(key, min, max).value_or(0);
}

std::optional<double> FieldReader::optional_number(std::string_view key) {
  const nlohmann::json* value = member(key);
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
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) {
    if (value) fail(key, "expected a number", *value);
    else fail_text(key, "missing (expected a number)");
    return 0;
  }
  return optional_number(key).value_or(0);
}

std::optional<std::string> FieldReader::optional_string(std::string_view key, size_t max_bytes) {
  const nlohmann::json* value = member(key);
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
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) {
    if (value) fail(key, "expected a string", *value);
    else fail_text(key, "missing (expected a string)");
    return {};
  }
  return optional_string(key, max_bytes).value_or(std::string());
}

std::optional<bool> FieldReader::optional_boolean(std::string_view key) {
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_boolean()) {
    fail(key, "expected true or false", *value);
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<std::vector<std::string>> FieldReader::optional_string_array(std::string_view key, size_t max_items,
                                                                           size_t max_bytes) {
  const nlohmann::json* value = member(key);
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
  for (const nlohmann::json& item : *value) {
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
  if (!member(key)) {
    fail_text(key, "missing (expected an array of strings)");
    return {};
  }
  std::optional<std::vector<std::string>> items = optional_string_array(key, max_items, max_bytes);
  if (!items && ok()) fail(key, "expected an array of strings", *member(key));
  return items.value_or(std::vector<std::string>());
}

std::vector<int64_t> FieldReader::optional_integer_array(std::string_view key, size_t max_items) {
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) return {};
  if (!value->is_array() || value->size() > max_items) {
    fail(key, "expected an array of at most " + std::to_string(max_items) + " integers", *value);
    return {};
  }
  std::vector<int64_t> items;
  for (const nlohmann::json& item : *value) {
    std::optional<int64_t> number = as_integer(item);
    if (!number) {
      fail(key, "expected an array of integers, one item is not", item);
      return {};
    }
    items.push_back(*number);
  }
  return items;
}

const nlohmann::json* FieldReader::optional_object(std::string_view key) {
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) return nullptr;
  if (!value->is_object()) {
    fail(key, "expected an object", *value);
    return nullptr;
  }
  return value;
}

const nlohmann::json* FieldReader::object(std::string_view key) {
  if (!member(key)) {
    fail_text(key, "missing (expected an object)");
    return nullptr;
  }
  const nlohmann::json* value = optional_object(key);
  if (!value && ok()) fail(key, "expected an object", *member(key));
  return value;
}

const nlohmann::json* FieldReader::optional_array(std::string_view key) {
  const nlohmann::json* value = member(key);
  if (!value || value->is_null()) return nullptr;
  if (!value->is_array()) {
    fail(key, "expected an array", *value);
    return nullptr;
  }
  return value;
}

}  // namespace dtrain::proto
