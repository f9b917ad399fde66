#pragma once
// The launcher's one way to read a field of a JSON object that someone else wrote. nlohmann's
// value() and get<T>() throw on a type mismatch and const operator[] on a missing key is
// undefined; nothing that arrives from a worker, an agent, a socket or a file may crash us.
//
// Two flavours over the same checks:
//   - FieldReader: for a parser that turns a peer's message into a typed struct (launcher/proto,
//     the store): a required field that is absent or mistyped is an error, and the first problem
//     is remembered as "<message>.<field>: expected <type>, got <what>".
//   - json_int / json_string / ...: lenient reads with a fallback, for readers of files that a
//     person or an older version may have written (state.json, events.jsonl), where a missing
//     field is normal and must not stop `dtrain status`.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain {

/// The member `key` of `object`, or nullptr when `object` is not an object or lacks it.
const nlohmann::json* json_member(const nlohmann::json& object, std::string_view key);

/// `value` as an integer: a whole number within int64, or a whole-valued float (some JSON writers
/// emit every number as a double) within ±9e18; else nullopt.
std::optional<int64_t> json_as_integer(const nlohmann::json& value);

/// An integer member (json_as_integer), else nullopt.
std::optional<int64_t> json_int(const nlohmann::json& object, std::string_view key);

/// A numeric member as double, else nullopt.
std::optional<double> json_number(const nlohmann::json& object, std::string_view key);

/// A string member, else `fallback`.
std::string json_string(const nlohmann::json& object, std::string_view key, std::string_view fallback = "");

/// A boolean member, else `fallback`.
bool json_bool(const nlohmann::json& object, std::string_view key, bool fallback = false);

/// Compact, never-throwing serialisation (invalid UTF-8 is replaced, not thrown on).
std::string json_compact(const nlohmann::json& value);

/// Sets object[key] to *value when there is one: how every writer leaves an absent field out.
template <class T>
void put_optional(nlohmann::json& object, const char* key, const std::optional<T>& value) {
  if (value) object[key] = *value;
}

/// A short description of a JSON value for error messages: `null`, `a string "ab…"`, `3.5`.
std::string describe_json_value(const nlohmann::json& value);

/// Checked reads of one JSON object's fields. Never throws; remembers the first problem.
class FieldReader {
 public:
  /// `what` names the message in errors ("beat", "exit"; empty: the field's name alone);
  /// `object` must outlive the reader.
  FieldReader(std::string what, const nlohmann::json& object) : what_(std::move(what)), object_(object) {
    if (!object_.is_object()) fail("", "expected a JSON object", object_);
  }

  /// Whether `key` is present and not null.
  bool has(std::string_view key) const;

  /// Required fields: absent or mistyped is an error. Optional ones: absent (or null) gives
  /// nullopt, mistyped is an error. Integers must be whole numbers within [min, max].
  int64_t integer(std::string_view key, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max());
  std::optional<int64_t> optional_integer(std::string_view key,
                                          int64_t min = std::numeric_limits<int64_t>::min(),
                                          int64_t max = std::numeric_limits<int64_t>::max());
  double number(std::string_view key);
  std::optional<double> optional_number(std::string_view key);
  std::string string(std::string_view key, size_t max_bytes = kDefaultMaxStringBytes);
  std::optional<std::string> optional_string(std::string_view key, size_t max_bytes = kDefaultMaxStringBytes);
  std::optional<bool> optional_boolean(std::string_view key);
  /// An array of strings (each at most max_bytes, at most max_items of them).
  std::vector<std::string> string_array(std::string_view key, size_t max_items, size_t max_bytes);
  std::optional<std::vector<std::string>> optional_string_array(std::string_view key, size_t max_items,
                                                                size_t max_bytes);
  /// An array of integers.
  std::vector<int64_t> optional_integer_array(std::string_view key, size_t max_items);
  /// A member that must be an object (returned as is, for a nested reader), or nullptr.
  const nlohmann::json* object(std::string_view key);
  const nlohmann::json* optional_object(std::string_view key);
  /// A member that must be an array, or nullptr.
  const nlohmann::json* optional_array(std::string_view key);
  /// A member of any type but null, returned as is (an opaque id the reply echoes), or nullptr.
  const nlohmann::json* optional_value(std::string_view key) const;

  bool ok() const { return !problem_.has_value(); }
  /// The first problem, as an Error (user kind: the sender is at fault, not us).
  Error error() const { return Error::user(problem_.value_or(what_ + ": no problem")); }
  /// Records a problem found by the caller (e.g. a value out of a set).
  void fail(std::string_view key, std::string_view expected, const nlohmann::json& got);
  void fail_text(std::string_view key, std::string text);

  static constexpr size_t kDefaultMaxStringBytes = 1 << 20;

 private:
  std::string where(std::string_view key) const;

  std::string what_;
  const nlohmann::json& object_;
  std::optional<std::string> problem_;
};

}  // namespace dtrain
