#pragma once
// Checked reads of one JSON object's fields, for the parsers that turn what a peer sent into a
// typed struct (agent_messages.cpp, worker_messages.cpp, the control protocol). nlohmann's
// value() and get<T>() throw on a type mismatch; everything that arrives from a worker, an
// agent or a socket goes through a FieldReader instead, which never throws and remembers the
// first problem as "<message>.<field>: expected <type>, got <what>".

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain::proto {

/// A short description of a JSON value for error messages: `null`, `a string "ab…"`, `3.5`.
std::string describe_json_value(const nlohmann::json& value);

class FieldReader {
 public:
  /// `what` names the message in errors ("beat", "exit"); `object` must outlive the reader.
  FieldReader(std::string what, const nlohmann::json& object) : what_(std::move(what)), object_(object) {
    if (!object_.is_object()) fail("", "expected a JSON object", object_);
  }

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

  bool ok() const { return !problem_.has_value(); }
  /// The first problem, as an Error (user kind: the sender is at fault, not us).
  Error error() const { return Error::user(problem_.value_or(what_ + ": no problem")); }
  /// Records a problem found by the caller (e.g. a value out of a set).
  void fail(std::string_view key, std::string_view expected, const nlohmann::json& got);
  void fail_text(std::string_view key, std::string text);

  static constexpr size_t kDefaultMaxStringBytes = 1 << 20;

 private:
  const nlohmann::json* member(std::string_view key) const;
  std::string where(std::string_view key) const;

  std::string what_;
  const nlohmann::json& object_;
  std::optional<std::string> problem_;
};

}  // namespace dtrain::proto
