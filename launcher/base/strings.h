#pragma once
// Small string helpers shared by every module.

#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

std::vector<std::string> split(std::string_view text, char separator);
std::string_view trim(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);
std::string join(const std::vector<std::string>& parts, std::string_view separator);

/// Levenshtein distance, for "did you mean …" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` if it is close enough to be a plausible typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

/// Quotes one argument for a POSIX shell so that it arrives unchanged: 'it'\''s'.
std::string shell_quote(std::string_view argument);

}  // namespace dtrain
