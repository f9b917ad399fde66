#pragma once
// The open-file limit of a supervisor: it holds a few descriptors per host (a socket for a
// libssh2 session; three pipes and a pidfd for an ssh, srun or kubectl child), so a launcher
// for thousands of hosts runs out at a default limit of 1,024 or 20,000 and loses hosts while
// connecting, each with "Too many open files". It raises its own limit first, and says so when
// it cannot.

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "launcher/base/result.h"

namespace dtrain {

/// Descriptors a supervisor of `hosts` hosts (spares included) may hold at once: per host, the
/// most any transport takes (an ssh or kubectl child: stdin, stdout, stderr, pidfd), plus room
/// for the run log, the control socket, the registry and the libraries.
uint64_t open_files_needed(size_t hosts);

struct OpenFileLimit {
  uint64_t soft = 0;       ///< RLIMIT_NOFILE now (what the process may open)
  uint64_t hard = 0;
  bool raised_hard = false;  ///< the hard limit was raised too (CAP_SYS_RESOURCE)
};

/// Raises RLIMIT_NOFILE's soft limit to the hard one, and the hard one up to `needed` where this
/// process may (CAP_SYS_RESOURCE, at most /proc/sys/fs/nr_open). An error (kind user) when the
/// limit stays under `needed`: it names both numbers and how to raise the hard limit; the limit
/// is raised as far as it could be all the same.
Result<OpenFileLimit> raise_open_file_limit(uint64_t needed);

}  // namespace dtrain
