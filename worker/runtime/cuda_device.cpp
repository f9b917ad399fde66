#include "worker/runtime/cuda_device.h"

#include <charconv>
#include <vector>

namespace dtrain::worker {
namespace {

std::optional<int> parse_index(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  int value = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

int cuda_ordinal(const std::optional<std::string>& dtrain_device,
                 const std::optional<std::string>& cuda_visible_devices, int local_rank, int device_count) {
  int ordinal = local_rank;
  std::optional<int> physical = dtrain_device ? parse_index(*dtrain_device) : std::nullopt;
  if (physical && !cuda_visible_devices) {
    ordinal = *physical;
  } else if (physical) {
    // CUDA renumbers the visible devices 0..n-1 in the order listed. Entries may be UUIDs
    // (GPU-…): those cannot be matched to a slot number, and LOCAL_RANK stays.
    std::string_view list = *cuda_visible_devices;
    int position = 0;
    while (true) {
      size_t comma = list.find(',');
      if (parse_index(list.substr(0, comma)) == physical) {
        ordinal = position;
        break;
      }
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
      ++position;
    }
  }
  if (device_count > 0) ordinal %= device_count;
  return ordinal < 0 ? 0 : ordinal;
}

}  // namespace dtrain::worker
