#include "launcher/base/runtime_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "launcher/base/fd.h"

namespace dtrain {
namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string uid_text(uid_t uid) { return std::to_string(static_cast<unsigned long>(uid)); }

const char* const kFix = "remove it (as root if need be); until then each run uses a fresh private directory instead";

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
                        ", not to this process's uid " + uid_text(::geteuid()) +
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
                          uid_text(entry->st_uid) + ", neither root nor this process's uid " +
                          uid_text(::geteuid()) + "; fix: use a base under /tmp");
    }
  }
  if (!S_ISDIR(info.st_mode)) {
    return Error::infra("runtime directory parent '" + path + "' is not a directory");
  }
  bool others_may_write = (info.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (others_may_write && (info.st_mode & S_ISVTX) == 0) {
    return Error::infra("runtime directory parent '" + path + "' has mode " + octal_mode(info.st_mode) +
                        ": others may write there and it is not sticky, so they could replace "
                        "our directory; fix: chmod +t '" + path + "' or use a base under /tmp");
  }
  return {};
}

// Every directory from the root down to `path` itself, which we rely on but do not create.
Status check_trusted_path(const std::string& path) {
  if (Status trusted = check_trusted_ancestor("/"); !trusted) return trusted;
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    if (Status trusted = check_trusted_ancestor(path.substr(0, slash)); !trusted) return trusted;
  }
  return path == "/" ? Status{} : check_trusted_ancestor(path);
}

// "/tmp" for "/tmp/dtrain-0", "/" for "/x"; `path` is absolute.
std::string parent_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
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

std::string default_runtime_base() {
  std::string override_base = environment("DTRAIN_RUNTIME_BASE");
  return override_base.empty() ? "/tmp/dtrain-" + uid_text(::geteuid()) : override_base;
}

Status make_runtime_directory(const RuntimeDirectory& directory) {
  const std::string& base = directory.base;
  if (base.size() < 2 || base[0] != '/' || base.back() == '/') {
    return Error::user("runtime directory '" + base + "' is not an absolute path without a trailing '/'");
  }
  if (Status trusted = check_trusted_path(parent_of(base)); !trusted) return trusted;
  if (Status made = make_private(base); !made) return made;
  return make_private(directory.path());
}

namespace {

// A fresh base no one else can have made: mkdtemp creates it 0700 under a random name, and
// fails instead of reusing a name that exists.
Result<std::string> make_fallback_base(const std::string& refused_base) {
  std::string pattern = refused_base + "-XXXXXX";
  if (!check_trusted_path(parent_of(refused_base))) pattern = "/tmp/dtrain-" + uid_text(::geteuid()) + "-XXXXXX";
  if (Status trusted = check_trusted_path(parent_of(pattern)); !trusted) return trusted.error();
  std::string name = pattern;
  if (::mkdtemp(name.data()) == nullptr) {
    return Error::infra("runtime directory '" + pattern + "': mkdtemp: " + errno_text(errno));
  }
  if (Status checked = check_private(name); !checked) return checked.error();
  return name;
}

}  // namespace

Result<RuntimeDirectoryChoice> open_runtime_directory(const std::string& requested_runtime_dir) {
  Result<std::string> id = run_short_id(requested_runtime_dir);
  if (!id) return id.error();
  std::string base = parent_of(requested_runtime_dir);
  RuntimeDirectoryChoice choice{{base, *id}, ""};
  Status made = make_runtime_directory(choice.directory);
  if (made) return choice;
  if (made.error().kind == ErrorKind::user) return made.error();  // not an absolute path
  choice.refused = made.error().message;
  Result<std::string> fallback = make_fallback_base(base);
  if (!fallback) {
    return Error::infra(choice.refused + "; and no private directory could be made instead: " +
                        fallback.error().message);
  }
  choice.directory.base = *fallback;
  if (Status inner = make_private(choice.directory.path()); !inner) {
    ::rmdir(fallback->c_str());
    return Error::infra(choice.refused + "; and no private directory could be made instead: " + inner.error().message);
  }
  return choice;
}

void remove_runtime_directory(const RuntimeDirectoryChoice& choice) {
  ::rmdir(choice.directory.path().c_str());
  if (choice.fell_back()) ::rmdir(choice.directory.base.c_str());
}

}  // namespace dtrain
