#include "launcher/base/fd.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

namespace dtrain {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int error_number) {
  char buffer[256];
  // GNU strerror_r returns the message pointer (possibly not `buffer`).
  return strerror_r(error_number, buffer, sizeof buffer);
}

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::infra("pipe: " + errno_text(errno));
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Status set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Error::infra("fcntl(O_NONBLOCK): " + errno_text(errno));
  }
  return {};
}

Status redirect_to_dev_null(std::initializer_list<int> fds) {
  UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd.valid()) return Error::infra("open /dev/null: " + errno_text(errno));
  for (int fd : fds) {
    if (fd >= 0 && fd != null_fd.get()) ::dup2(null_fd.get(), fd);
  }
  return {};
}

Status write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return Error::infra("write: " + errno_text(errno));
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return {};
}

Result<size_t> read_some(int fd, std::string& out, bool* would_block) {
  if (would_block) *would_block = false;
  char buffer[65536];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got >= 0) {
      out.append(buffer, static_cast<size_t>(got));
      return static_cast<size_t>(got);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (would_block) *would_block = true;
      return size_t{0};
    }
    return Error::infra("read: " + errno_text(errno));
  }
}

namespace {

/// Removes a temp file unless it was renamed into place: every early return of
/// write_file_atomic (a full disk at write or fsync) must not leave "<path>.tmp.<random>" behind.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void renamed() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

std::string unpredictable_suffix() {
  unsigned char bytes[8];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    ssize_t got = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (got > 0) {
      filled += static_cast<size_t>(got);
    } else if (got < 0 && errno != EINTR) {
      // No getrandom (a very old kernel, a seccomp filter): the clock and the pid still make a
      // name nobody can pre-create reliably, and O_EXCL refuses any that was.
      uint64_t fallback = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                          (static_cast<uint64_t>(::getpid()) << 40);
      std::memcpy(bytes, &fallback, sizeof bytes);
      break;
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text;
}

UniqueFd create_exclusive_temp(const std::string& path, int mode, std::string& temp_path) {
  for (int attempt = 0;; ++attempt) {
    temp_path = path + ".tmp." + unpredictable_suffix();
    UniqueFd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    // EEXIST twice in a row from 64 random bits is not chance: report it rather than loop.
    if (fd.valid() || errno != EEXIST || attempt == 2) return fd;
  }
}

namespace {

std::string disk_full_hint(int error_number, const std::string& directory) {
  if (error_number != ENOSPC && error_number != EDQUOT) return "";
  return "; free space on the file system of " + directory;
}

}  // namespace

Status write_file_atomic(const std::string& path, std::string_view contents, int mode, Durability durability) {
  size_t slash = path.find_last_of('/');
  std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string temp;
  UniqueFd fd = create_exclusive_temp(path, mode, temp);
  if (!fd.valid()) {
    int saved = errno;
    return Error::infra(temp + ": " + errno_text(saved) + disk_full_hint(saved, directory));
  }
  TempFileGuard guard(temp);
  // The mode asked for, whatever the umask: a group-readable mode is a user's explicit choice.
  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    return Error::infra(temp + ": chmod: " + errno_text(errno));
  }
  while (!contents.empty()) {
    ssize_t written = ::write(fd.get(), contents.data(), contents.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      int saved = written < 0 ? errno : EIO;
      return Error::infra(path + ": cannot write (" + errno_text(saved) + "); the old file is unchanged" +
                          disk_full_hint(saved, directory));
    }
    contents.remove_prefix(static_cast<size_t>(written));
  }
  // fsync and close report delayed write errors (ENOSPC on NFS, EIO): both count.
  bool synced = durability == Durability::kSynced;
  if ((synced && ::fsync(fd.get()) != 0) || ::close(fd.release()) != 0) {
    int saved = errno;
    return Error::infra(path + ": cannot write (fsync: " + errno_text(saved) + "); the old file is unchanged" +
                        disk_full_hint(saved, directory));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    return Error::infra(path + ": rename: " + errno_text(saved) + "; the old file is unchanged");
  }
  guard.renamed();
  if (!synced) return {};
  UniqueFd dir_fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.valid()) ::fsync(dir_fd.get());
  return {};
}

Result<std::string> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Error::user(path + ": " + errno_text(errno));
  std::string contents;
  for (;;) {
    Result<size_t> got = read_some(fd.get(), contents);
    if (!got) return Error::infra(path + ": " + got.error().message);
    if (*got == 0) break;
  }
  return contents;
}

}  // namespace dtrain
