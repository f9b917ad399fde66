#include "launcher/agent/runtime_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "launcher/base/fd.h"

namespace dtrain::agent {
namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string uid_text(uid_t uid) { return std::to_string(static_cast<unsigned long>(uid)); }

const char* const kFix = "remove it (as root if need be), or give the agent a private XDG_RUNTIME_DIR";

// A directory dtrain creates and then trusts: nobody else may own it, enter it or redirect it.
Status check_private(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0) {
    return Error::infra("runtime directory '" + path + "': " + errno_text(errno));
  }
  if (S_ISLNK(info.st_mode)) {
    return Error::infra("runtime directory '" + path +
                        "' is a symbolic link; the agent does not follow links here, because "
                        "whoever owns the link decides where workers connect; fix: " + kFix);
  }
  if (!S_ISDIR(info.st_mode)) {
    return Error::infra("runtime directory '" + path + "' is not a directory; fix: " + kFix);
  }
  if (info.st_uid != ::geteuid()) {
    return Error::infra("runtime directory '" + path + "' belongs to uid " + uid_text(info.st_uid) +
                        ", not to this agent's uid " + uid_text(::geteuid()) +
                        " (another user may have created it to intercept workers); fix: " + kFix);
  }
  if ((info.st_mode & 07777) != 0700) {
    return Error::infra("runtime directory '" + path + "' has mode " + octal_mode(info.st_mode) +
                        ", not 0700, so others could reach the worker socket in it; fix: " +
                        "chmod 0700 '" + path + "' if you made it, or remove it");
  }
  return {};
}

// A directory we rely on but do not create (/tmp, $XDG_RUNTIME_DIR and their parents): a
// link, owner or write bit that lets another user replace our directory in it is refused.
Status check_trusted_ancestor(const std::string& path) {
  struct stat link{};
  struct stat info{};
  if (::lstat(path.c_str(), &link) != 0 || ::stat(path.c_str(), &info) != 0) {
    return Error::infra("runtime directory parent '" + path + "': " + errno_text(errno));
  }
  for (const struct stat* entry : {&link, &info}) {
    if (entry->st_uid != 0 && entry->st_uid != ::geteuid()) {
      return Error::infra("runtime directory parent '" + path + "' belongs to uid " +
                          uid_text(entry->st_uid) + ", neither root nor this agent's uid " +
                          uid_text(::geteuid()) + "; fix: point XDG_RUNTIME_DIR at a private directory");
    }
  }
  if (!S_ISDIR(info.st_mode)) {
    return Error::infra("runtime directory parent '" + path + "' is not a directory");
  }
  bool others_may_write = (info.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (others_may_write && (info.st_mode & S_ISVTX) == 0) {
    return Error::infra("runtime directory parent '" + path + "' has mode " + octal_mode(info.st_mode) +
                        ": others may write there and it is not sticky, so they could replace "
                        "our directory; fix: chmod +t '" + path + "' or point XDG_RUNTIME_DIR elsewhere");
  }
  return {};
}

// mkdir 0700 whatever the umask, then the checks above (also for one that was already there).
Status make_private(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) {
    if (::chmod(path.c_str(), 0700) != 0) {
      return Error::infra("runtime directory '" + path + "': chmod 0700: " + errno_text(errno));
    }
  } else if (errno != EEXIST) {
    return Error::infra("runtime directory '" + path + "': cannot create it: " + errno_text(errno));
  }
  return check_private(path);
}

bool usable_xdg_runtime_dir(const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  struct stat info{};
  return ::lstat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == ::geteuid() &&
         (info.st_mode & 07777) == 0700;
}

// The supervisor's text in our messages, with control and non-ASCII bytes as \xNN: the
// message travels in a JSON frame and must say what was wrong, not be cut or refused.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return out;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

Result<std::string> run_short_id(const std::string& requested_runtime_dir) {
  std::string id = requested_runtime_dir.substr(requested_runtime_dir.rfind('/') + 1);
  std::string where = "config.runtime_dir '" + printable(requested_runtime_dir) + "'";
  if (id.empty() || id == "." || id == "..") {
    return Error::user(where + ": its last component must name the run (e.g. /tmp/dtrain-1000/3fa2c1d0)");
  }
  for (char c : id) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
    if (!plain) {
      return Error::user(where + ": the run id '" + printable(id) + "' may hold only A-Z a-z 0-9 . _ -");
    }
  }
  if (id.size() > kMaxRunIdBytes) {
    return Error::user(where + ": the run id is " + std::to_string(id.size()) + " bytes, over " +
                       std::to_string(kMaxRunIdBytes) +
                       "; a worker socket path must fit in 107 bytes, so keep it short");
  }
  return id;
}

std::string choose_runtime_base(const std::string& override_base, const std::string& xdg_runtime_dir) {
  if (!override_base.empty()) return override_base;
  if (usable_xdg_runtime_dir(xdg_runtime_dir)) return xdg_runtime_dir + "/dtrain";
  return "/tmp/dtrain-" + uid_text(::geteuid());
}

Result<RuntimeDirectory> choose_runtime_directory(const std::string& requested_runtime_dir) {
  Result<std::string> id = run_short_id(requested_runtime_dir);
  if (!id) return id.error();
  return RuntimeDirectory{
      choose_runtime_base(environment("DTRAIN_RUNTIME_BASE"), environment("XDG_RUNTIME_DIR")), *id};
}

Status make_runtime_directory(const RuntimeDirectory& directory) {
  const std::string& base = directory.base;
  if (base.size() < 2 || base[0] != '/' || base.back() == '/') {
    return Error::user("runtime directory '" + base + "' is not an absolute path without a trailing '/'");
  }
  // Every ancestor, from the root down to the base's parent.
  for (size_t slash = base.find('/', 1); slash != std::string::npos; slash = base.find('/', slash + 1)) {
    if (Status trusted = check_trusted_ancestor(base.substr(0, slash)); !trusted) return trusted;
  }
  if (Status trusted = check_trusted_ancestor("/"); !trusted) return trusted;
  if (Status made = make_private(base); !made) return made;
  return make_private(directory.path());
}

}  // namespace dtrain::agent
