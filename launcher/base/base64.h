#pragma once
// Standard base64 (RFC 4648, the '+' '/' alphabet), one implementation for every user:
// known_hosts key blobs and OpenSSH fingerprints (transport), the srun transport's byte stream,
// and the flight-recorder dumps an agent ships. Std only.

#include <string>
#include <string_view>

namespace dtrain {

/// Standard base64; `pad` false drops the trailing '=' (OpenSSH fingerprints).
std::string base64_encode(std::string_view bytes, bool pad = true);

/// Decodes standard base64 (padding optional: up to two trailing '=').
/// False on a character outside the alphabet (blanks and line breaks included) or a length no
/// encoder produces; `out` is then unspecified.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace dtrain
