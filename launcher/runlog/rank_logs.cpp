#include "launcher/runlog/rank_logs.h"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <unistd.h>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"

namespace dtrain {
namespace {

// A supervisor of thousands of ranks must not run out of descriptors (the soft limit is often
// 1024): past this many open logs, all are closed and reopened on demand.
constexpr size_t kMaxOpenFiles = 256;

constexpr std::string_view kMarkerStart = "=== dtrain generation ";

}  // namespace

std::string generation_marker(int generation, int64_t wall_ms) {
  return std::string(kMarkerStart) + std::to_string(generation) + " (" +
         format_timestamp_utc(wall_ms) + ") ===";
}

bool parse_generation_marker(std::string_view line, int* generation) {
  if (!starts_with(line, kMarkerStart) || line.size() < 4 || line.substr(line.size() - 4) != " ===") {
    return false;
  }
  std::string digits(line.substr(kMarkerStart.size()));
  char* end = nullptr;
  long value = std::strtol(digits.c_str(), &end, 10);
  if (end == digits.c_str() || *end != ' ') return false;
  if (generation) *generation = static_cast<int>(value);
  return true;
}

Status RankLogs::append(int rank, int generation, std::string_view text, int64_t wall_ms) {
  RankFile& file = files_[rank];
  std::string path = ranks_dir_ + "/" + std::to_string(rank) + ".log";
  if (!file.fd.valid()) {
    size_t open_count = 0;
    for (const auto& [_, other] : files_) open_count += other.fd.valid() ? 1 : 0;
    if (open_count >= kMaxOpenFiles) {
      // Keep the generation bookkeeping; only the descriptors go.
      for (auto& [_, other] : files_) other.fd.reset();
    }
    file.fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!file.fd.valid()) return Error::infra(path + ": cannot open rank log: " + errno_text(errno));
  }
  std::string bytes;
  if (file.generation != generation) {
    if (!file.at_line_start) bytes += '\n';
    bytes += generation_marker(generation, wall_ms) + "\n";
    file.generation = generation;
    file.at_line_start = true;
  }
  bytes.append(text);
  if (bytes.empty()) return {};
  if (Status written = write_all(file.fd.get(), bytes); !written) {
    return Error::infra(path + ": " + written.error().message);
  }
  file.at_line_start = bytes.back() == '\n';
  return {};
}

}  // namespace dtrain
