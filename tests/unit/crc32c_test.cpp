#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "worker/runtime/crc32c.h"
#include "worker/runtime/worker.h"

using namespace dtrain::worker;

namespace {

/// One bit at a time, straight from the definition: shares no table or code with the runtime.
uint32_t bitwise_crc32c(const unsigned char* bytes, size_t size, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) {
    crc ^= bytes[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

using Crc = uint32_t (*)(const void*, size_t, uint32_t);

struct Implementation {
  const char* name;
  Crc function;
};

std::vector<Implementation> implementations() {
  return {{"portable", crc32c_impl::portable},
          {"hardware", crc32c_impl::hardware},
          {"crc32c()", [](const void* data, size_t size, uint32_t crc) { return crc32c(data, size, crc); }}};
}

std::vector<unsigned char> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<unsigned char> bytes(size);
  for (unsigned char& byte : bytes) byte = static_cast<unsigned char>(random());
  return bytes;
}

}  // namespace

TEST_CASE("crc32c: every implementation gives the RFC 3720 B.4 and check values") {
  MESSAGE("worker::crc32c uses " << crc32c_impl::implementation_name());
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<unsigned char>(i);
    descending[i] = static_cast<unsigned char>(31 - i);
  }
  // RFC 3720 B.4's iSCSI SCSI Read (10) command PDU.
  std::vector<unsigned char> read_pdu{0x01, 0xC0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                                      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                                      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  for (const Implementation& implementation : implementations()) {
    CAPTURE(implementation.name);
    CHECK(implementation.function("123456789", 9, 0) == 0xE3069283u);
    CHECK(implementation.function("", 0, 0) == 0u);
    CHECK(implementation.function(zeros.data(), zeros.size(), 0) == 0x8A9136AAu);
    CHECK(implementation.function(ones.data(), ones.size(), 0) == 0x62A8AB43u);
    CHECK(implementation.function(ascending.data(), ascending.size(), 0) == 0x46DD794Eu);
    CHECK(implementation.function(descending.data(), descending.size(), 0) == 0x113FDB5Cu);
    CHECK(implementation.function(read_pdu.data(), read_pdu.size(), 0) == 0xD9963A56u);
    // Chaining two parts gives the CRC of the whole.
    CHECK(implementation.function("56789", 5, implementation.function("1234", 4, 0)) == 0xE3069283u);
  }
}

TEST_CASE("crc32c: hardware and portable agree with the bitwise definition at odd lengths and alignments") {
  if (!crc32c_impl::hardware_available()) MESSAGE("no CRC32C instruction here: 'hardware' is the table path");
  // Lengths around every boundary of the hardware path: the 8-byte words, the three-stream rounds
  // of 3 x 256 and 3 x 8192 bytes, and several rounds of each.
  std::vector<size_t> lengths{0, 1, 7, 8, 9, 15, 63, 767, 768, 769, 1000, 2303, 2305, 24575, 24576, 24577, 49153, 100003};
  std::vector<unsigned char> buffer = random_bytes(100003 + 16, 13);
  for (size_t length : lengths) {
    for (size_t offset = 0; offset < 8; ++offset) {
      CAPTURE(length);
      CAPTURE(offset);
      const unsigned char* start = buffer.data() + offset;
      uint32_t expected = bitwise_crc32c(start, length);
      for (const Implementation& implementation : implementations()) {
        CAPTURE(implementation.name);
        CHECK(implementation.function(start, length, 0) == expected);
      }
    }
  }
}

TEST_CASE("crc32c: random buffers, split at random points and chained, match in every implementation") {
  std::mt19937_64 random(2026);
  for (int round = 0; round < 40; ++round) {
    size_t length = random() % 200000;
    size_t offset = random() % 8;
    std::vector<unsigned char> bytes = random_bytes(length + offset, random());
    const unsigned char* start = bytes.data() + offset;
    uint32_t seed = static_cast<uint32_t>(random());  // any previous CRC to chain from
    uint32_t expected = bitwise_crc32c(start, length, seed);
    size_t split = length == 0 ? 0 : random() % length;
    CAPTURE(length);
    CAPTURE(offset);
    CAPTURE(split);
    for (const Implementation& implementation : implementations()) {
      CAPTURE(implementation.name);
      CHECK(implementation.function(start, length, seed) == expected);
      uint32_t head = implementation.function(start, split, seed);
      CHECK(implementation.function(start + split, length - split, head) == expected);
    }
  }
}
