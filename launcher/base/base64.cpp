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

std::string base64_encode(std::string_view bytes, bool pad) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t chunk = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) chunk |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) chunk |= static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    if (i + 1 < bytes.size()) out += kAlphabet[(chunk >> 6) & 63];
    else if (pad) out += '=';
    if (i + 2 < bytes.size()) out += kAlphabet[chunk & 63];
    else if (pad) out += '=';
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
  if (text.size() % 4 == 1) return false;  // a lone 6-bit group: no encoder ends with one
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t bits = 0;
  int held = 0;
  for (char c : text) {
    int8_t value = kValues[static_cast<unsigned char>(c)];
    if (value < 0) return false;
    bits = (bits << 6) | static_cast<uint32_t>(value);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out += static_cast<char>((bits >> held) & 0xff);
    }
  }
  return true;
}

}  // namespace dtrain
