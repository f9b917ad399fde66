#include <doctest/doctest.h>

#include <random>
#include <string>

#include "launcher/base/base64.h"

using namespace dtrain;

TEST_CASE("base64: RFC 4648's test vectors, padded and unpadded") {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},         {"f", "Zg=="},        {"fo", "Zm8="},       {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    CAPTURE(plain);
    CHECK(base64_encode(plain) == encoded);
    std::string unpadded = encoded.substr(0, encoded.find('='));
    CHECK(base64_encode(plain, false) == unpadded);
    std::string decoded = "left over";
    CHECK(base64_decode(encoded, decoded));
    CHECK(decoded == plain);
    CHECK(base64_decode(unpadded, decoded));
    CHECK(decoded == plain);
  }
}

TEST_CASE("base64: every byte value and every length up to 300 round-trip") {
  std::mt19937 random(7);
  for (size_t length = 0; length <= 300; ++length) {
    std::string bytes(length, '\0');
    for (char& byte : bytes) byte = static_cast<char>(random() & 0xff);
    if (length == 256) {
      for (size_t i = 0; i < 256; ++i) bytes[i] = static_cast<char>(i);
    }
    for (bool pad : {true, false}) {
      std::string encoded = base64_encode(bytes, pad);
      CHECK(encoded.size() == (pad ? (length + 2) / 3 * 4 : (length * 4 + 2) / 3));
      std::string decoded;
      REQUIRE(base64_decode(encoded, decoded));
      CHECK(decoded == bytes);
    }
  }
}

TEST_CASE("base64: text outside the alphabet or of an impossible length is refused, with nothing kept") {
  for (const char* bad : {"Zm9v!", "Zm9vY", "Zm 9v", "Zg=a", "Z===", "====", "Zm9vYmFy\n", "Zm\x80v"}) {
    CAPTURE(bad);
    std::string decoded = "left over";
    CHECK_FALSE(base64_decode(bad, decoded));
    CHECK(decoded.empty());
  }
}
