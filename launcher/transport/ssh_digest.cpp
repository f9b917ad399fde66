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

std::string base64_encode(std::string_view bytes, bool pad) {
  // EVP_EncodeBlock takes an int length; what we encode (keys, digests) is far below that.
  if (bytes.size() > static_cast<size_t>(INT_MAX / 4 * 3)) return {};
  std::vector<unsigned char> out(4 * ((bytes.size() + 2) / 3) + 1);
  int length = EVP_EncodeBlock(out.data(), reinterpret_cast<const unsigned char*>(bytes.data()),
                               static_cast<int>(bytes.size()));
  std::string text(reinterpret_cast<const char*>(out.data()), static_cast<size_t>(length));
  if (!pad) {
    while (!text.empty() && text.back() == '=') text.pop_back();
  }
  return text;
}

bool base64_decode(std::string_view text, std::string& out) {
  out.clear();
  std::string padded(text);
  if (padded.size() % 4 == 1) return false;  // no encoder ends with a lone 6-bit group
  while (padded.size() % 4 != 0) padded += '=';
  if (padded.size() > static_cast<size_t>(INT_MAX)) return false;
  // EVP_DecodeBlock would skip surrounding blanks; a blank is not in the alphabet here.
  for (char c : padded) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return false;
  }
  std::vector<unsigned char> decoded(padded.size() / 4 * 3 + 1);
  int length = EVP_DecodeBlock(decoded.data(), reinterpret_cast<const unsigned char*>(padded.data()),
                               static_cast<int>(padded.size()));
  if (length < 0) return false;
  // EVP_DecodeBlock counts the bytes that padding stands for as zeros; they are not data.
  size_t padding = 0;
  for (size_t i = padded.size(); i > 0 && padded[i - 1] == '=' && padding < 2; --i) ++padding;
  out.assign(reinterpret_cast<const char*>(decoded.data()), static_cast<size_t>(length) - padding);
  return true;
}

std::string openssh_fingerprint_of_digest(std::string_view sha256_digest) {
  return "SHA256:" + base64_encode(sha256_digest, false);
}

std::string openssh_fingerprint(std::string_view key_blob) {
  return openssh_fingerprint_of_digest(sha256(key_blob));
}

}  // namespace dtrain::transport
