#include "launcher/base/base64.h"

#include <array>
#include <cstdint>

namespace dtrain {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The 6-bit value of each byte, or -1 for one outside the alphabet.
constexpr std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> table{};
  for (size_t i = 0; i < table.size(); ++i) table[i] = -1;
  for (int8_t i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = i;
  return table;
}

}  // namespace

// Both write into a buffer sized once: a supervisor with 16,384 relayed hosts runs every frame
// through them (relay_to, relay_from), and a character at a time through std::string::operator+=
// was a tenth of its loop.
std::string base64_encode(std::string_view bytes, bool pad) {
  const size_t whole = bytes.size() / 3;
  const size_t rest = bytes.size() % 3;
  std::string out(whole * 4 + (rest == 0 ? 0 : pad ? 4 : rest + 1), '\0');
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data());
  char* to = out.data();
  for (size_t i = 0; i < whole; ++i, in += 3, to += 4) {
    uint32_t chunk = (uint32_t{in[0]} << 16) | (uint32_t{in[1]} << 8) | in[2];
    to[0] = kAlphabet[(chunk >> 18) & 63];
    to[1] = kAlphabet[(chunk >> 12) & 63];
    to[2] = kAlphabet[(chunk >> 6) & 63];
    to[3] = kAlphabet[chunk & 63];
  }
  if (rest != 0) {
    uint32_t chunk = uint32_t{in[0]} << 16;
    if (rest == 2) chunk |= uint32_t{in[1]} << 8;
    to[0] = kAlphabet[(chunk >> 18) & 63];
    to[1] = kAlphabet[(chunk >> 12) & 63];
    if (rest == 2) to[2] = kAlphabet[(chunk >> 6) & 63];
    else if (pad) to[2] = '=';
    if (pad) to[3] = '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& out) {
  static constexpr std::array<int8_t, 256> kValues = decode_table();
  out.clear();
  size_t padding = 0;
  while (padding < 2 && !text.empty() && text.back() == '=') {
    text.remove_suffix(1);
    ++padding;
  }
  const size_t rest = text.size() % 4;
  if (rest == 1) return false;  // a lone 6-bit group: no encoder ends with one
  const size_t whole = text.size() / 4;
  out.resize(whole * 3 + (rest == 0 ? 0 : rest - 1));
  const auto* in = reinterpret_cast<const unsigned char*>(text.data());
  char* to = out.data();
  for (size_t i = 0; i < whole; ++i, in += 4, to += 3) {
    int32_t a = kValues[in[0]], b = kValues[in[1]], c = kValues[in[2]], d = kValues[in[3]];
    if ((a | b | c | d) < 0) {
      out.clear();
      return false;
    }
    uint32_t chunk = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c) << 6) | uint32_t(d);
    to[0] = static_cast<char>(chunk >> 16);
    to[1] = static_cast<char>((chunk >> 8) & 0xff);
    to[2] = static_cast<char>(chunk & 0xff);
  }
  if (rest != 0) {
    // 2 characters make one byte, 3 make two; their spare low bits are ignored, as before.
    uint32_t chunk = 0;
    for (size_t i = 0; i < rest; ++i) {
      int32_t value = kValues[in[i]];
      if (value < 0) {
        out.clear();
        return false;
      }
      chunk |= uint32_t(value) << (18 - 6 * i);
    }
    to[0] = static_cast<char>(chunk >> 16);
    if (rest == 3) to[1] = static_cast<char>((chunk >> 8) & 0xff);
  }
  return true;
}

}  // namespace dtrain
