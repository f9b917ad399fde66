// CRC32C (Castagnoli polynomial, reflected 0x82F63B78): with the CPU's instruction where there is
// one (x86-64 SSE4.2, chosen at run time; AArch64 CRC extension), slicing-by-8 tables elsewhere.
// Every path computes the same function, so checkpoints verify the same on every machine.
//
// Why three streams: the x86 crc32 instruction has a latency of 3 cycles and a throughput of 1,
// so one dependent chain uses a third of it (~8 GB/s). Three independent chains over three
// adjacent blocks, joined at the end with a precomputed "append N zero bytes" operator, run at
// memory speed. The join is linear algebra over GF(2): crc(A|B) = shift_|B|(crc(A)) ^ crc0(B),
// where crc0 starts from a zero register (no pre-inversion) and shift_n appends n zero bytes.
#include "worker/runtime/crc32c.h"

#include <array>
#include <cstring>

#include "worker/runtime/worker.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#define DTRAIN_CRC32C_TARGET __attribute__((target("sse4.2")))
#define DTRAIN_CRC32C_HARDWARE 1
#elif defined(__aarch64__)
// The compilers' builtins rather than <arm_acle.h>: older clang declares __crc32cd there only
// when the whole file targets +crc, and this file picks the instruction at run time.
#if defined(__ARM_FEATURE_CRC32)
#define DTRAIN_CRC32C_TARGET
#elif defined(__clang__)
#define DTRAIN_CRC32C_TARGET __attribute__((target("crc")))
#else
#define DTRAIN_CRC32C_TARGET __attribute__((target("+crc")))
#endif
#if !defined(__ARM_FEATURE_CRC32)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)  // <asm/hwcap.h> on arm64
#endif
#endif
#define DTRAIN_CRC32C_HARDWARE 1
#else
#define DTRAIN_CRC32C_HARDWARE 0
#endif

namespace dtrain::worker {
namespace crc32c_impl {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;

/// kSlicing[0] is the classic byte table; kSlicing[k][b] is the register contribution of byte b
/// followed by k zero bytes, so that eight bytes are folded with eight independent lookups.
using SlicingTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr SlicingTables make_slicing_tables() {
  SlicingTables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    tables[0][i] = crc;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t previous = tables[k - 1][i];
      tables[k][i] = (previous >> 8) ^ tables[0][previous & 0xFFu];
    }
  }
  return tables;
}

constexpr SlicingTables kSlicing = make_slicing_tables();

/// Advances a raw register (no pre/post inversion) over `size` bytes.
uint32_t portable_register(uint32_t state, const unsigned char* bytes, size_t size) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, bytes, 8);
    word ^= state;
    state = kSlicing[7][word & 0xFFu] ^ kSlicing[6][(word >> 8) & 0xFFu] ^ kSlicing[5][(word >> 16) & 0xFFu] ^
            kSlicing[4][(word >> 24) & 0xFFu] ^ kSlicing[3][(word >> 32) & 0xFFu] ^
            kSlicing[2][(word >> 40) & 0xFFu] ^ kSlicing[1][(word >> 48) & 0xFFu] ^ kSlicing[0][word >> 56];
    bytes += 8;
    size -= 8;
  }
#endif
  for (size_t i = 0; i < size; ++i) state = kSlicing[0][(state ^ bytes[i]) & 0xFFu] ^ (state >> 8);
  return state;
}

#if DTRAIN_CRC32C_HARDWARE

/// The linear map "append `length` zero bytes" on a raw register, as four byte-indexed tables.
class ZeroAppender {
 public:
  explicit ZeroAppender(size_t length) {
    // The image of each of the 32 basis registers, then every byte value as an XOR of images.
    std::array<uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t state = 1u << bit;
      for (size_t i = 0; i < length; ++i) state = kSlicing[0][state & 0xFFu] ^ (state >> 8);
      basis[bit] = state;
    }
    for (int lane = 0; lane < 4; ++lane) {
      for (uint32_t value = 0; value < 256; ++value) {
        uint32_t image = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (value & (1u << bit)) image ^= basis[lane * 8 + bit];
        }
        tables_[lane][value] = image;
      }
    }
  }
  uint32_t operator()(uint32_t state) const {
    return tables_[0][state & 0xFFu] ^ tables_[1][(state >> 8) & 0xFFu] ^ tables_[2][(state >> 16) & 0xFFu] ^
           tables_[3][state >> 24];
  }

 private:
  std::array<std::array<uint32_t, 256>, 4> tables_{};
};

// Block sizes of the three-stream loop: long blocks for bulk data, short ones so that a few
// kilobytes (headers, small shards) also get the interleaving.
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

const ZeroAppender& append_long_zeros() {
  static const ZeroAppender appender(kLongBlock);
  return appender;
}
const ZeroAppender& append_short_zeros() {
  static const ZeroAppender appender(kShortBlock);
  return appender;
}

#if defined(__x86_64__)
DTRAIN_CRC32C_TARGET inline uint64_t step_word(uint64_t state, uint64_t word) { return _mm_crc32_u64(state, word); }
DTRAIN_CRC32C_TARGET inline uint32_t step_byte(uint32_t state, unsigned char byte) { return _mm_crc32_u8(state, byte); }
#else
#if defined(__clang__)
DTRAIN_CRC32C_TARGET inline uint64_t step_word(uint64_t state, uint64_t word) {
  return __builtin_arm_crc32cd(static_cast<uint32_t>(state), word);
}
DTRAIN_CRC32C_TARGET inline uint32_t step_byte(uint32_t state, unsigned char byte) {
  return __builtin_arm_crc32cb(state, byte);
}
#else
DTRAIN_CRC32C_TARGET inline uint64_t step_word(uint64_t state, uint64_t word) {
  return __builtin_aarch64_crc32cx(static_cast<uint32_t>(state), word);
}
DTRAIN_CRC32C_TARGET inline uint32_t step_byte(uint32_t state, unsigned char byte) {
  return __builtin_aarch64_crc32cb(state, byte);
}
#endif
#endif

DTRAIN_CRC32C_TARGET inline uint64_t load_word(const unsigned char* at) {
  uint64_t word;
  std::memcpy(&word, at, 8);  // both targets are little-endian, and both allow unaligned loads
  return word;
}

/// Three adjacent blocks of `block` bytes per round, one chain each, joined with `append`.
DTRAIN_CRC32C_TARGET uint32_t three_streams(uint32_t state, const unsigned char*& bytes, size_t& size, size_t block,
                                            const ZeroAppender& append) {
  while (size >= 3 * block) {
    uint64_t first = state, second = 0, third = 0;
    for (size_t at = 0; at < block; at += 8) {
      first = step_word(first, load_word(bytes + at));
      second = step_word(second, load_word(bytes + block + at));
      third = step_word(third, load_word(bytes + 2 * block + at));
    }
    state = append(static_cast<uint32_t>(first)) ^ static_cast<uint32_t>(second);
    state = append(state) ^ static_cast<uint32_t>(third);
    bytes += 3 * block;
    size -= 3 * block;
  }
  return state;
}

DTRAIN_CRC32C_TARGET uint32_t hardware_register(uint32_t state, const unsigned char* bytes, size_t size) {
  // Align to 8 first: the remaining loads then never straddle a cache line.
  while (size > 0 && (reinterpret_cast<uintptr_t>(bytes) & 7u) != 0) {
    state = step_byte(state, *bytes++);
    --size;
  }
  if (size >= 3 * kLongBlock) state = three_streams(state, bytes, size, kLongBlock, append_long_zeros());
  if (size >= 3 * kShortBlock) state = three_streams(state, bytes, size, kShortBlock, append_short_zeros());
  uint64_t wide = state;
  for (; size >= 8; bytes += 8, size -= 8) wide = step_word(wide, load_word(bytes));
  state = static_cast<uint32_t>(wide);
  for (; size > 0; --size) state = step_byte(state, *bytes++);
  return state;
}

bool detect_hardware() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#elif defined(__ARM_FEATURE_CRC32)
  return true;
#else
  return (::getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
}

#endif  // DTRAIN_CRC32C_HARDWARE

}  // namespace

uint32_t portable(const void* data, size_t size, uint32_t crc) {
  return ~portable_register(~crc, static_cast<const unsigned char*>(data), size);
}

bool hardware_available() {
#if DTRAIN_CRC32C_HARDWARE
  static const bool available = detect_hardware();
  return available;
#else
  return false;
#endif
}

uint32_t hardware(const void* data, size_t size, uint32_t crc) {
#if DTRAIN_CRC32C_HARDWARE
  if (hardware_available()) return ~hardware_register(~crc, static_cast<const unsigned char*>(data), size);
#endif
  return portable(data, size, crc);
}

const char* implementation_name() {
  if (!hardware_available()) return "table";
#if defined(__x86_64__)
  return "sse4.2";
#else
  return "armv8-crc";
#endif
}

}  // namespace crc32c_impl

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  // hardware() itself falls back to the tables on a CPU without the instruction.
  return crc32c_impl::hardware(data, size, crc);
}

}  // namespace dtrain::worker
