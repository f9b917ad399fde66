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

/// Untrusted text made safe to print in a message: control bytes (NUL, ESC, newlines) and the
/// UTF-8 C1 controls (U+0080..U+009F, e.g. CSI) become \xNN, so a NUL cannot cut the message
/// and escape sequences cannot reach a terminal. At most
/// `max_bytes` of the input are shown, followed by "..." when it was longer.
std::string printable(std::string_view text, size_t max_bytes = std::string_view::npos);

}  // namespace dtrain
