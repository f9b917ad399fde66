#include "launcher/supervisor/failure_blame.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace dtrain::supervisor {
namespace {

// Lower case; matched anywhere in a line.
constexpr std::array<std::string_view, 6> kLostPeerPhrases = {
    "is gone (crashed or killed?)",                      // dtrain-train's Gloo communicator
    "connection closed by peer",                         // Gloo
    "connection reset by peer",                          // Gloo, sockets in general
    "remote process exited or there was a network error",  // NCCL
    "socket closed by remote",                           // NCCL's socket transport
    "communicator was aborted",                          // torch ProcessGroupNCCL after a peer failed
};

bool line_reads_as_lost_peer(const std::string& line) {
  std::string lower(line.size(), '\0');
  std::transform(line.begin(), line.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(kLostPeerPhrases.begin(), kLostPeerPhrases.end(),
                     [&](std::string_view phrase) { return lower.find(phrase) != std::string::npos; });
}

}  // namespace

bool reads_as_lost_peer(const std::vector<std::string>& last_output, const std::string& detail) {
  // The last few lines only: a rank that recovered from a reset connection long ago and then
  // failed for its own reason is not a consequence.
  constexpr size_t kLastLines = 5;
  size_t from = last_output.size() > kLastLines ? last_output.size() - kLastLines : 0;
  for (size_t i = from; i < last_output.size(); ++i) {
    if (line_reads_as_lost_peer(last_output[i])) return true;
  }
  return line_reads_as_lost_peer(detail);
}

}  // namespace dtrain::supervisor
