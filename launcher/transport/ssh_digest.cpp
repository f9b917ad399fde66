#include "launcher/transport/ssh_digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <vector>

namespace dtrain::transport {

std::string sha256(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1) return {};
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string sha256_hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : sha256(bytes)) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

std::string hmac_sha1(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!HMAC(EVP_sha1(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
            data.size(), digest, &length)) {
    return {};
  }
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string openssh_fingerprint_of_digest(std::string_view sha256_digest) {
  return "SHA256:" + base64_encode(sha256_digest, false);
}

std::string openssh_fingerprint(std::string_view key_blob) {
  return openssh_fingerprint_of_digest(sha256(key_blob));
}

}  // namespace dtrain::transport
