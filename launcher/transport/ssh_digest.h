#pragma once
// SHA-256 and base64 for the SSH transport: host key fingerprints as OpenSSH prints them
// ("SHA256:" + unpadded base64), known_hosts lines, and the checksum of a provisioned binary.
// Our own small implementation so that the transport needs no crypto library of its own.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain::transport {

/// Incremental SHA-256 (FIPS 180-4).
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  /// The 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> finish();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

/// Lowercase hex of sha256(bytes), as `sha256sum` prints it.
std::string sha256_hex(std::string_view bytes);

/// Standard base64; `pad` false drops the trailing '=' (OpenSSH fingerprints).
std::string base64_encode(std::string_view bytes, bool pad = true);

/// Decodes standard base64 (padding optional). False on a character outside the alphabet.
bool base64_decode(std::string_view text, std::string& out);

/// "SHA256:uR1q..." for a raw public key blob, as `ssh-keygen -lf` prints it.
std::string openssh_fingerprint(std::string_view key_blob);

}  // namespace dtrain::transport
