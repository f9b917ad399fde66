#pragma once
// Non-throwing field access for JSON read back from disk or a socket. nlohmann's get<T>() throws
// on a type mismatch and const operator[] on a missing key is undefined; a hand-edited or
// half-written state.json must never crash `dtrain status`, so readers go through these.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dtrain {

/// The member `key` of `object`, or nullptr when `object` is not an object or lacks it.
inline const nlohmann::json* json_member(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

/// An integer member (a whole-valued float counts), else nullopt.
inline std::optional<int64_t> json_int(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* member = json_member(object, key);
  if (!member) return std::nullopt;
  if (member->is_number_integer()) return member->get<int64_t>();
  if (member->is_number_unsigned()) {
    uint64_t value = member->get<uint64_t>();
    if (value > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(value);
  }
  if (member->is_number_float()) {
    double value = member->get<double>();
    // Range first: converting a double outside int64's range is undefined behaviour (found by
    // fuzz/control_request: a reply's "generation" of 9.18e20).
    if (!(value >= -9.0e18 && value <= 9.0e18)) return std::nullopt;
    if (value == static_cast<double>(static_cast<int64_t>(value))) return static_cast<int64_t>(value);
  }
  return std::nullopt;
}

/// A numeric member as double, else nullopt.
inline std::optional<double> json_number(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* member = json_member(object, key);
  if (!member || !member->is_number()) return std::nullopt;
  return member->get<double>();
}

/// A string member, else `fallback`.
inline std::string json_string(const nlohmann::json& object, std::string_view key,
                               std::string_view fallback = "") {
  const nlohmann::json* member = json_member(object, key);
  if (!member || !member->is_string()) return std::string(fallback);
  return member->get<std::string>();
}

/// A boolean member, else `fallback`.
inline bool json_bool(const nlohmann::json& object, std::string_view key, bool fallback = false) {
  const nlohmann::json* member = json_member(object, key);
  if (!member || !member->is_boolean()) return fallback;
  return member->get<bool>();
}

/// Compact, never-throwing serialisation (invalid UTF-8 is replaced, not thrown on).
inline std::string json_compact(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dtrain
