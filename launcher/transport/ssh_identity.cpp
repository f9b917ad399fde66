#include "launcher/transport/ssh_identity.h"

#include <cerrno>
#include <cstdint>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/transport/ssh_digest.h"

namespace dtrain::transport {
namespace {

/// Reads one SSH wire string (uint32 length + bytes) at `offset`; false past the end.
bool read_wire_string(const std::string& blob, size_t& offset, std::string& out) {
  if (offset + 4 > blob.size()) return false;
  uint32_t length = (uint32_t(uint8_t(blob[offset])) << 24) | (uint32_t(uint8_t(blob[offset + 1])) << 16) |
                    (uint32_t(uint8_t(blob[offset + 2])) << 8) | uint32_t(uint8_t(blob[offset + 3]));
  offset += 4;
  if (length > blob.size() - offset) return false;
  out = blob.substr(offset, length);
  offset += length;
  return true;
}

/// "openssh-key-v1\0" ciphername kdfname kdfoptions nkeys(uint32) publickey(string: type ...)
void parse_openssh_body(const std::string& base64_body, IdentityFile& identity) {
  std::string blob;
  if (!base64_decode(base64_body, blob)) return;
  static const std::string kMagic("openssh-key-v1\0", 15);
  if (blob.compare(0, kMagic.size(), kMagic) != 0) return;
  size_t offset = kMagic.size();
  std::string cipher, kdf, kdf_options, public_key, key_type;
  if (!read_wire_string(blob, offset, cipher) || !read_wire_string(blob, offset, kdf) ||
      !read_wire_string(blob, offset, kdf_options)) {
    return;
  }
  identity.encrypted = cipher != "none";
  offset += 4;  // number of keys
  size_t key_offset = 0;
  if (read_wire_string(blob, offset, public_key) && read_wire_string(public_key, key_offset, key_type)) {
    identity.key_type = key_type;
  }
}

}  // namespace

IdentityFile inspect_identity_file(const std::string& path) {
  IdentityFile identity;
  identity.path = path;
  // A private key is a few kB; a FIFO or a device named as one must not stall the connect.
  auto text = read_regular_file(path, size_t{1} << 20, FollowLinks::kYes, "a private key is a few kB");
  if (!text) {
    identity.error = text.error().message;
    return identity;
  }
  identity.readable = true;
  const std::string& contents = *text;
  if (contents.find("BEGIN OPENSSH PRIVATE KEY") != std::string::npos) {
    std::string body;
    bool inside = false;
    for (const std::string& line : split(contents, '\n')) {
      std::string_view trimmed = trim(line);
      if (starts_with(trimmed, "-----BEGIN")) inside = true;
      else if (starts_with(trimmed, "-----END")) break;
      else if (inside) body += trimmed;
    }
    parse_openssh_body(body, identity);
  } else if (contents.find("BEGIN RSA PRIVATE KEY") != std::string::npos) {
    identity.key_type = "ssh-rsa";
  } else if (contents.find("BEGIN EC PRIVATE KEY") != std::string::npos) {
    identity.key_type = "ecdsa-sha2-nistp256";  // curve not parsed: only "not RSA" matters
  } else if (contents.find("BEGIN DSA PRIVATE KEY") != std::string::npos) {
    identity.key_type = "ssh-dss";
  } else if (contents.find("BEGIN ENCRYPTED PRIVATE KEY") != std::string::npos) {
    identity.encrypted = true;
  }
  if (contents.find("Proc-Type: 4,ENCRYPTED") != std::string::npos) identity.encrypted = true;
  return identity;
}

}  // namespace dtrain::transport
