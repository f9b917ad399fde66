#pragma once
// RAII for file descriptors, and read/write helpers that retry EINTR inside the wrapper so that
// call sites never do.

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "launcher/base/result.h"

namespace dtrain {

/// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// A pipe whose both ends are O_CLOEXEC.
struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};
Result<Pipe> make_pipe();

Status set_nonblocking(int fd);

/// Puts /dev/null in place of each of `fds` (dup2), so that the numbers stay taken and whatever
/// was open there (a session's pipes, a terminal) is closed. An error when /dev/null cannot be
/// opened; the fds are then left as they were.
Status redirect_to_dev_null(std::initializer_list<int> fds);

/// Writes all of `bytes` (blocking fd), retrying EINTR and short writes.
Status write_all(int fd, std::string_view bytes);

/// One read(2) into `out` (appended); returns bytes read, 0 at EOF. EAGAIN gives 0 bytes with
/// `would_block` set.
Result<size_t> read_some(int fd, std::string& out, bool* would_block = nullptr);

/// 16 hex digits from getrandom(): a name part that another user cannot guess in advance.
std::string unpredictable_suffix();

/// Creates "<path>.tmp.<unpredictable_suffix()>" with O_CREAT | O_EXCL | O_NOFOLLOW, so that a
/// file or symbolic link planted under a temp name is never opened, truncated or followed: a
/// fixed name ("<path>.tmp", "<path>.tmp.<pid>") could be pre-created by another user of a shared
/// directory. Sets `temp_path` to the name tried; an invalid fd leaves errno set.
UniqueFd create_exclusive_temp(const std::string& path, int mode, std::string& temp_path);

/// Writes `contents` to `path` atomically: a temp file from create_exclusive_temp() in the same
/// directory, set to exactly `mode` (the umask does not narrow it), fsync, rename, fsync of the
/// directory. The one way the launcher writes a file whole. Readers see the old or the new file, never half of one. On any
/// failure (write, fsync, rename) the temp file is removed and the old file stays as it was;
/// the error says so, and for ENOSPC/EDQUOT names the directory to free space in.
/// `Durability::kUnsynced` skips both fsyncs: still atomic for readers, but after a machine
/// crash the file may be the old one or empty. For files that are re-made anyway (a host's
/// facts at every connect): two fsyncs per host were seconds of writer time at 2,048 hosts.
enum class Durability { kSynced, kUnsynced };
Status write_file_atomic(const std::string& path, std::string_view contents, int mode = 0600,
                         Durability durability = Durability::kSynced);

/// Reads a whole file.
Result<std::string> read_file(const std::string& path);

/// "No such file or directory" for errno values, thread-safe.
std::string errno_text(int error_number);

}  // namespace dtrain
