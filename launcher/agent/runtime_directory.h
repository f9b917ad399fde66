#pragma once
// Where an agent puts its worker socket. The supervisor only names the run (the last component
// of config.runtime_dir); the agent picks the base from its own uid, because the launch node's
// uid need not be ours on this host, and a directory that someone else created is a directory
// where they can plant a socket of their own and feed our workers forged rendezvous values.
// Internal to the agent module (worker_socket.cpp uses it); tests call it directly.

#include <string>

#include "launcher/base/result.h"

namespace dtrain::agent {

/// One run's socket directory: `<base>/<run_id>`.
struct RuntimeDirectory {
  std::string base;    ///< $XDG_RUNTIME_DIR/dtrain, or /tmp/dtrain-<euid>, or $DTRAIN_RUNTIME_BASE
  std::string run_id;  ///< the run's short id, one path component
  std::string path() const { return base + "/" + run_id; }
};

/// The run's short id: the final component of the supervisor's `runtime_dir`. Refuses an empty,
/// "." or ".." component, bytes outside [A-Za-z0-9._-] and more than kMaxRunIdBytes.
Result<std::string> run_short_id(const std::string& requested_runtime_dir);
inline constexpr size_t kMaxRunIdBytes = 64;

/// The base for run directories, chosen from the environment given:
///   `override_base` when non-empty ($DTRAIN_RUNTIME_BASE; for tests, which need a base they
///   can pre-create under another owner), else `<xdg_runtime_dir>/dtrain` when xdg_runtime_dir
///   is absolute, a real directory (not a symlink), ours and mode 0700, else /tmp/dtrain-<euid>.
std::string choose_runtime_base(const std::string& override_base, const std::string& xdg_runtime_dir);

/// run_short_id + choose_runtime_base from the process environment. Creates nothing.
Result<RuntimeDirectory> choose_runtime_directory(const std::string& requested_runtime_dir);

/// Creates `base` and `base/run_id` (mode 0700) where missing and checks each one that now
/// exists: not a symlink, a directory, owned by our euid, mode exactly 0700. The base's parent
/// (/tmp, $XDG_RUNTIME_DIR), which we rely on but do not create, must be a directory owned by
/// root or us and, if others may write to it, sticky (so that nobody can swap our directory).
/// Errors name the path, what is wrong (owner uid, mode) and the fix.
Status make_runtime_directory(const RuntimeDirectory& directory);

}  // namespace dtrain::agent
