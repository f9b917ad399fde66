#pragma once
// Where a run's sockets live on one host: the supervisor's ctl.sock and each agent's worker
// socket, in `<base>/<run short id>`. The supervisor picks the path (runlog's RunDirectory) and
// sends it to every agent whole (config.runtime_dir); nobody derives it from a uid alone. Each
// process that uses it checks every component: a directory someone else created or can enter is
// one where they can plant a socket of their own and feed workers forged rendezvous values.
// A refused base does not stop the run: this run gets a fresh private directory (mkdtemp)
// instead, so a `mkdir /tmp/dtrain-<uid>` by another user blocks nobody.

#include <string>

#include "launcher/base/result.h"

namespace dtrain {

/// One run's socket directory: `<base>/<run_id>`.
struct RuntimeDirectory {
  std::string base;    ///< e.g. /tmp/dtrain-<uid>, or a fallback /tmp/dtrain-<uid>-Ab12Cd
  std::string run_id;  ///< the run's short id, one path component
  std::string path() const { return base + "/" + run_id; }
};

/// The base the supervisor asks for: $DTRAIN_RUNTIME_BASE when set and non-empty (for tests,
/// which plant a blocker in a directory of their own), else /tmp/dtrain-<euid>.
std::string default_runtime_base();

/// The run's short id: the final component of `requested_runtime_dir`. Refuses an empty, "." or
/// ".." component, bytes outside [A-Za-z0-9._-] and more than kMaxRunIdBytes. Messages start
/// with "config.runtime_dir '<path>'" (an agent's view of the supervisor's config).
Result<std::string> run_short_id(const std::string& requested_runtime_dir);
inline constexpr size_t kMaxRunIdBytes = 64;

/// Creates `base` and `base/run_id` (mode 0700) where missing and checks each one that now
/// exists: not a symlink, a directory, owned by our euid, mode exactly 0700. The base's parent
/// (/tmp), which we rely on but do not create, and every directory above it, must be a
/// directory owned by root or us and, if others may write to it, sticky (so that nobody can swap
/// our directory). Errors name the path, what is wrong (owner uid, mode) and the fix.
Status make_runtime_directory(const RuntimeDirectory& directory);

/// What open_runtime_directory settled on.
struct RuntimeDirectoryChoice {
  RuntimeDirectory directory;  ///< the one in use, made and checked
  /// Why the requested base could not be used (make_runtime_directory's refusal: the path, its
  /// owner or mode); empty when it was used. Say it once: the run goes on in `directory`.
  std::string refused;
  bool fell_back() const { return !refused.empty(); }
};

/// The requested directory (`<base>/<run id>`, absolute) when make_runtime_directory accepts it;
/// else a fresh private base made with mkdtemp next to the refused one (`<base>-XXXXXX`), or in
/// /tmp (`/tmp/dtrain-<euid>-XXXXXX`) when the refused base's parent cannot be used either, with
/// the run directory in it. Errors: a bad run id or a relative path (user), or no fallback
/// possible either (infra, naming both reasons).
Result<RuntimeDirectoryChoice> open_runtime_directory(const std::string& requested_runtime_dir);

/// Removes the run directory if empty and, for a fallback, its base (made for this run only);
/// a directory something still lives in (another agent's socket) stays.
void remove_runtime_directory(const RuntimeDirectoryChoice& choice);

}  // namespace dtrain
