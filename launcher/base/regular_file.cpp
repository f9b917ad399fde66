#include "launcher/base/regular_file.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "launcher/base/strings.h"

namespace dtrain {
namespace {

// printable(): a path can hold any byte but NUL; an escape sequence must not reach a terminal.
std::string single_quoted(const std::string& path) { return "'" + printable(path) + "'"; }

Error not_regular(const std::string& path, unsigned st_mode) {
  if (S_ISLNK(st_mode)) {
    return Error::user(single_quoted(path) +
                       " is a symbolic link, and dtrain follows none to a file whose name it chose (someone else "
                       "may have planted it); replace the link with the file itself");
  }
  return Error::user(single_quoted(path) + " is " + describe_file_type(st_mode) +
                     ", not a regular file");
}

Error cannot_open(const std::string& path, int error_number) {
  return Error::user("cannot read " + single_quoted(path) + ": " + errno_text(error_number));
}

}  // namespace

std::string describe_file_type(unsigned st_mode) {
  switch (st_mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
    default: {
      char text[64];
      std::snprintf(text, sizeof text, "not a regular file (mode 0%o)", st_mode);
      return text;
    }
  }
}

std::string expand_home(const std::string& path) {
  if (path != "~" && path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  std::string base = home && *home ? home : "";
  if (base.empty()) {
    if (const passwd* entry = ::getpwuid(::geteuid())) base = entry->pw_dir;
  }
  return base + path.substr(1);
}

std::optional<int> parse_data_file_mode(std::string_view text) {
  if (text.size() < 3 || text.size() > 4 || text.find_first_not_of("01234567") != std::string_view::npos) {
    return std::nullopt;
  }
  int mode = 0;
  for (char digit : text) mode = mode * 8 + (digit - '0');
  if ((mode & ~0666) != 0 || (mode & 0600) != 0600 || (mode & 0002) != 0) return std::nullopt;
  return mode;
}

std::string describe_bytes(unsigned long long bytes) {
  constexpr unsigned long long kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10;
  char text[64];
  if (bytes >= kGiB) std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / kGiB);
  else if (bytes >= kMiB && bytes % kMiB == 0) std::snprintf(text, sizeof text, "%llu MiB", bytes / kMiB);
  else if (bytes >= kMiB) std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  else if (bytes >= kKiB && bytes % kKiB == 0) std::snprintf(text, sizeof text, "%llu KiB", bytes / kKiB);
  else std::snprintf(text, sizeof text, "%llu bytes", bytes);
  return text;
}

Result<UniqueFd> open_regular_file(const std::string& path, FollowLinks follow) {
  // The name is looked at before it is opened, so that a FIFO or a device is never opened at all
  // (opening some devices has effects: a tape rewinds); the fstat below catches a swap between
  // the two calls.
  struct stat named{};
  int looked = follow == FollowLinks::kYes ? ::stat(path.c_str(), &named) : ::lstat(path.c_str(), &named);
  if (looked != 0) return cannot_open(path, errno);
  if (!S_ISREG(named.st_mode)) return not_regular(path, named.st_mode);

  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow == FollowLinks::kNo ? O_NOFOLLOW : 0);
  UniqueFd fd(::open(path.c_str(), flags));
  if (!fd.valid()) {
    int saved = errno;
    // ELOOP under O_NOFOLLOW: the name became a link after the lstat; ENXIO: a socket.
    if (saved == ELOOP && follow == FollowLinks::kNo) return not_regular(path, S_IFLNK);
    if (saved == ENXIO) return not_regular(path, S_IFSOCK);
    return cannot_open(path, saved);
  }
  struct stat opened{};
  if (::fstat(fd.get(), &opened) != 0) return cannot_open(path, errno);
  if (!S_ISREG(opened.st_mode)) return not_regular(path, opened.st_mode);
  return fd;
}

Result<std::string> read_regular_file(const std::string& path, size_t max_bytes, FollowLinks follow,
                                      std::string_view too_large_fix) {
  Result<UniqueFd> fd = open_regular_file(path, follow);
  if (!fd) return fd.error();
  auto too_large = [&](unsigned long long size) {
    return Error::user(single_quoted(path) + " is " + describe_bytes(size) + ", over the " + describe_bytes(max_bytes) +
                       " limit" + (too_large_fix.empty() ? "" : "; " + std::string(too_large_fix)));
  };
  struct stat info{};
  if (::fstat(fd->get(), &info) != 0) return cannot_open(path, errno);
  if (static_cast<unsigned long long>(info.st_size) > max_bytes) return too_large(info.st_size);
  std::string contents;
  contents.reserve(static_cast<size_t>(info.st_size));
  for (;;) {
    Result<size_t> got = read_some(fd->get(), contents);
    if (!got) return Error::infra("cannot read " + single_quoted(path) + ": " + got.error().message);
    if (*got == 0) break;
    // Grown since the fstat (a file still being written): stop at the limit, do not follow it.
    if (contents.size() > max_bytes) return too_large(contents.size());
  }
  return contents;
}

}  // namespace dtrain
