#include "launcher/runlog/line_follower.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/base/regular_file.h"

namespace dtrain {
namespace {

// Every followed file is one of a run directory's (events.jsonl, rank logs), named by dtrain: a
// FIFO there would block the reader (status, logs, report) and a link was planted, so either is
// refused (open_regular_file). Not there yet is no error: the writer has not created it.
Result<UniqueFd> open_if_exists(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT) return UniqueFd();
  return open_regular_file(path, FollowLinks::kNo);
}

// pread(2) retrying EINTR; returns bytes read (0 at end of file).
Result<size_t> pread_some(int fd, char* buffer, size_t size, int64_t offset, const std::string& path) {
  for (;;) {
    ssize_t got = ::pread(fd, buffer, size, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) return Error::infra(path + ": read: " + errno_text(errno));
  }
}

}  // namespace

LineFollower::LineFollower(std::string path, int64_t start_offset)
    : path_(std::move(path)), offset_(start_offset) {}

Result<std::vector<std::string>> LineFollower::poll(size_t max_bytes) {
  std::vector<std::string> lines;
  if (!fd_.valid()) {
    Result<UniqueFd> opened = open_if_exists(path_);
    if (!opened) return opened.error();
    if (!opened->valid()) return lines;
    fd_ = std::move(*opened);
  }
  // The unfinished line is read again from the file every time: a writer whose append failed
  // cuts it off (EventLog::append) and writes the next line in its place, and stale bytes kept
  // here would glue onto that line.
  partial_.clear();
  struct stat info{};
  if (::fstat(fd_.get(), &info) == 0 && info.st_size < offset_) {
    return Error::infra(path_ + ": the file shrank from " + std::to_string(offset_) + " to " +
                        std::to_string(info.st_size) + " bytes while being followed (truncated?)");
  }
  size_t read_total = 0;
  char buffer[65536];
  while (read_total < max_bytes) {
    int64_t position = offset_ + static_cast<int64_t>(partial_.size());
    Result<size_t> got = pread_some(fd_.get(), buffer, sizeof buffer, position, path_);
    if (!got) return got.error();
    if (*got == 0) break;
    read_total += *got;
    partial_.append(buffer, *got);
  }
  size_t start = 0;
  for (size_t newline; (newline = partial_.find('\n', start)) != std::string::npos; start = newline + 1) {
    lines.emplace_back(partial_, start, newline - start);
  }
  offset_ += static_cast<int64_t>(start);
  partial_.erase(0, start);
  return lines;
}

bool LineFollower::replaced() const {
  struct stat now {}, reading {};
  if (!fd_.valid() || ::fstat(fd_.get(), &reading) != 0) return false;
  if (::stat(path_.c_str(), &now) != 0) return false;  // gone for now: nothing new to follow yet
  return now.st_ino != reading.st_ino || now.st_dev != reading.st_dev;
}

std::string LineFollower::take_partial() {
  offset_ += static_cast<int64_t>(partial_.size());
  return std::exchange(partial_, std::string());
}

Result<FileTail> read_tail_lines(const std::string& path, size_t count) {
  FileTail tail;
  Result<UniqueFd> fd = open_if_exists(path);
  if (!fd) return fd.error();
  if (!fd->valid()) return tail;
  struct stat info{};
  if (::fstat(fd->get(), &info) != 0) return Error::infra(path + ": " + errno_text(errno));
  const int64_t size = info.st_size;
  // Read backwards in blocks until `count` + 1 newlines are seen (the +1 bounds the oldest line).
  std::string text;  // bytes [begin, size)
  int64_t begin = size;
  const int64_t block = 65536;
  auto newlines = [&] { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); };
  while (begin > 0 && newlines() <= count) {
    int64_t from = std::max<int64_t>(0, begin - block);
    std::string chunk(static_cast<size_t>(begin - from), '\0');
    size_t filled = 0;
    while (filled < chunk.size()) {
      Result<size_t> got = pread_some(fd->get(), chunk.data() + filled, chunk.size() - filled,
                                      from + static_cast<int64_t>(filled), path);
      if (!got) return got.error();
      if (*got == 0) break;
      filled += *got;
    }
    chunk.resize(filled);
    text.insert(0, chunk);
    begin = from;
  }
  size_t last_newline = text.rfind('\n');
  if (last_newline == std::string::npos) {
    tail.partial = text;
    tail.complete_end = begin;
    return tail;
  }
  tail.partial = text.substr(last_newline + 1);
  tail.complete_end = begin + static_cast<int64_t>(last_newline) + 1;
  std::vector<std::string> lines;
  size_t end = last_newline;
  // Walk back over complete lines; the first (oldest) one is only whole if begin == 0 or a
  // newline precedes it.
  while (lines.size() < count) {
    size_t previous = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
    if (previous == std::string::npos) {
      if (begin == 0) lines.push_back(text.substr(0, end));
      break;
    }
    lines.push_back(text.substr(previous + 1, end - previous - 1));
    end = previous;
  }
  std::reverse(lines.begin(), lines.end());
  tail.lines = std::move(lines);
  return tail;
}

}  // namespace dtrain
