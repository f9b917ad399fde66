#pragma once
// Event timestamps back to numbers: drills measure "injected → detected" from the "ts" that
// the supervisor wrote and the one the drill wrote, both on this machine's wall clock.

#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dtrain::drill {

/// "2026-11-29T23:40:01.123Z" (format_timestamp_utc) → Unix-epoch milliseconds; nullopt for
/// anything else.
std::optional<int64_t> parse_timestamp_utc(std::string_view text);

/// The event's "ts" as Unix-epoch milliseconds; nullopt when absent or malformed.
std::optional<int64_t> event_wall_ms(const nlohmann::json& event);

}  // namespace dtrain::drill
