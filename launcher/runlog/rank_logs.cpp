#include "launcher/runlog/rank_logs.h"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"

namespace dtrain {
namespace {

// A supervisor of thousands of ranks must not run out of descriptors (the soft limit is often
// 1024): past this many open logs, all are closed and reopened on demand.
constexpr size_t kMaxOpenFiles = 256;

constexpr std::string_view kMarkerStart = "=== dtrain generation ";
constexpr std::string_view kRotationStart = "=== dtrain log rotated (";

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

bool is_rotation_marker(std::string_view line) {
  return starts_with(line, kRotationStart) && line.size() >= 4 && line.substr(line.size() - 4) == " ===";
}

std::string rotated_rank_log_path(const std::string& rank_log_path) { return rank_log_path + ".1"; }

Status RankLogs::open_file(RankFile& file, const std::string& path) {
  size_t open_count = 0;
  for (const auto& [_, other] : files_) open_count += other.fd.valid() ? 1 : 0;
  if (open_count >= kMaxOpenFiles) {
    // Keep the generation bookkeeping; only the descriptors go.
    for (auto& [_, other] : files_) other.fd.reset();
  }
  file.fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!file.fd.valid()) return Error::infra(path + ": cannot open rank log: " + errno_text(errno));
  struct stat info {};
  // A resumed supervisor appends to what the last one wrote: it counts toward the limit.
  file.size = ::fstat(file.fd.get(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
  return {};
}

Status RankLogs::rotate(int generation, RankFile& file, const std::string& path, int64_t wall_ms) {
  file.fd.reset();
  std::string old = rotated_rank_log_path(path);
  Status renamed;
  if (::rename(path.c_str(), old.c_str()) != 0) {
    renamed = Error::infra(path + ": cannot rotate to " + old + ": " + errno_text(errno) +
                           "; the log grows past logs.max_bytes until it can");
  }
  if (Status opened = open_file(file, path); !opened) return opened;
  if (!renamed) {
    file.size = 0;  // tried again after another max_bytes, not on every write
    return renamed;
  }
  std::string marker = std::string(kRotationStart) + format_timestamp_utc(wall_ms) + ", generation " +
                       std::to_string(generation) + "): earlier output is in " + old.substr(old.rfind('/') + 1) +
                       " ===\n";
  if (Status written = write_all(file.fd.get(), marker); !written) return Error::infra(path + ": " + written.error().message);
  file.size += marker.size();
  file.at_line_start = true;  // a line cut by the rotation goes on below the marker
  return {};
}

Status RankLogs::append(int rank, int generation, std::string_view text, int64_t wall_ms) {
  RankFile& file = files_[rank];
  std::string path = ranks_dir_ + "/" + std::to_string(rank) + ".log";
  if (!file.fd.valid()) {
    if (Status opened = open_file(file, path); !opened) return opened;
  }
  Status rotated;
  if (max_bytes_ > 0 && file.size > 0 && file.size + text.size() > max_bytes_) {
    rotated = rotate(generation, file, path, wall_ms);
    if (!file.fd.valid()) return rotated;
  }
  std::string bytes;
  if (file.generation != generation) {
    if (!file.at_line_start) bytes += '\n';
    bytes += generation_marker(generation, wall_ms) + "\n";
    file.generation = generation;
    file.at_line_start = true;
  }
  bytes.append(text);
  if (bytes.empty()) return rotated;
  if (Status written = write_all(file.fd.get(), bytes); !written) {
    return Error::infra(path + ": " + written.error().message);
  }
  file.size += bytes.size();
  file.at_line_start = bytes.back() == '\n';
  return rotated;
}

}  // namespace dtrain
