// launcher/transport/ssh_digest.h: SHA-256 through OpenSSL (FIPS 180-2 vectors), base64 (RFC
// 4648 vectors) and host key fingerprints that equal what `ssh-keygen -lf` prints for a key
// generated here.

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "launcher/transport/ssh_digest.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain::transport;
using dtrain::base64_decode;
using dtrain::base64_encode;

namespace {

std::string command_output(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  CHECK(::pclose(pipe) == 0);
  return out;
}

std::string field(const std::string& line, int index) {
  std::istringstream words(line);
  std::string word;
  for (int i = 0; i <= index; ++i) words >> word;
  return word;
}

}  // namespace

TEST_CASE("sha256 gives the standard test vectors") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1'000'000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(sha256("abc").size() == 32);
}

TEST_CASE("base64 encodes and decodes the RFC 4648 vectors, with or without padding") {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},          {"f", "Zg=="},         {"fo", "Zm8="},        {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    CHECK(base64_encode(plain) == encoded);
    std::string unpadded = encoded.substr(0, encoded.find('='));
    CHECK(base64_encode(plain, false) == unpadded);
    std::string decoded = "junk";
    CHECK(base64_decode(encoded, decoded));
    CHECK(decoded == plain);
    CHECK(base64_decode(unpadded, decoded));
    CHECK(decoded == plain);
  }
  std::string binary("\x00\xff\x10\x80", 4);
  std::string decoded;
  CHECK(base64_decode(base64_encode(binary), decoded));
  CHECK(decoded == binary);
  for (const char* bad : {"Zm9v!", "Z", "Zm9v YmFy", "Zm\n9v", "Zm==9v", "Zm9v=====", "Z==="}) {
    CHECK_MESSAGE(!base64_decode(bad, decoded), bad);
  }
}

TEST_CASE("a host key fingerprint equals ssh-keygen -lf for a key generated here") {
  dtrain::testing::TempDir temp;
  std::string key = temp.path + "/key";
  command_output("ssh-keygen -q -t ed25519 -N '' -C test -f " + key + " >/dev/null");
  std::ifstream pub_file(key + ".pub");
  std::string pub_line;
  std::getline(pub_file, pub_line);
  std::string blob;
  REQUIRE(base64_decode(field(pub_line, 1), blob));  // "ssh-ed25519 AAAA... test"
  std::string expected = field(command_output("ssh-keygen -lf " + key + ".pub"), 1);  // "256 SHA256:... test (ED25519)"
  REQUIRE(expected.rfind("SHA256:", 0) == 0);
  CHECK(openssh_fingerprint(blob) == expected);
  CHECK(openssh_fingerprint_of_digest(sha256(blob)) == expected);
  // And the known_hosts form of the key round-trips.
  CHECK(base64_encode(blob) == field(pub_line, 1));
}
