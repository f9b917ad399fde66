#pragma once
// Digests for the SSH transport (base64 is launcher/base/base64.h): host key fingerprints as OpenSSH prints them
// ("SHA256:" + unpadded base64), known_hosts lines, and the checksum of a provisioned binary.
// The hashing is OpenSSL's (EVP), which libssh2 already links: no crypto of our own. Host key
// fingerprints come from libssh2_hostkey_hash where a session exists; these functions format
// them.

#include <string>
#include <string_view>

#include "launcher/base/base64.h"  // base64_encode/decode: the transport's users include this header

namespace dtrain::transport {

/// The raw 32-byte SHA-256 of `bytes` (OpenSSL EVP). Empty only if OpenSSL fails (out of memory).
std::string sha256(std::string_view bytes);

/// Lowercase hex of sha256(bytes), as `sha256sum` prints it. Empty only if OpenSSL fails.
std::string sha256_hex(std::string_view bytes);

/// The raw 20-byte HMAC-SHA1 of `data` under `key` (OpenSSL): what hashed known_hosts entries
/// ("|1|salt|hash") hold for a host name. Empty only if OpenSSL fails.
std::string hmac_sha1(std::string_view key, std::string_view data);

/// "SHA256:uR1q..." for a 32-byte SHA-256 digest of a public key blob (what
/// libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256) returns), as `ssh-keygen -lf`
/// prints it.
std::string openssh_fingerprint_of_digest(std::string_view sha256_digest);

/// The same for a raw public key blob (hashes it first): for keys that no session presents.
std::string openssh_fingerprint(std::string_view key_blob);

}  // namespace dtrain::transport
