#pragma once
// Process exit codes of every dtrain subcommand. Documented in man/dtrain.1 (EXIT STATUS);
// scripts and cron jobs depend on them, so values never change meaning.

#include "launcher/base/result.h"

namespace dtrain {

enum class ExitCode : int {
  ok = 0,            ///< the job (or subcommand) succeeded
  job_failed = 1,    ///< a worker failed and the failure budget is spent (or no elastic settings)
  usage = 2,         ///< bad command line, invalid spec, unknown run
  infra = 3,         ///< could not start: host unreachable, agent failed, run directory unwritable
  crash_loop = 4,    ///< no step progress across consecutive generations
  hosts_lost = 5,    ///< fewer than elastic.min_hosts hosts remain
  preempted = 6,     ///< stopped on SIGTERM or `dtrain stop --checkpoint` after asking every rank to
                     ///< save one step (preempt_grace): `dtrain resume` continues from it
  internal = 70,     ///< a bug in dtrain (EX_SOFTWARE)
  interrupted = 130  ///< stopped by Ctrl-C, SIGHUP or `dtrain stop`
};

inline int to_int(ExitCode code) { return static_cast<int>(code); }

/// The exit code a subcommand returns when it stops on `error`: usage for the user's mistakes,
/// infra for the world's, internal for ours.
inline int exit_code_for(const Error& error) {
  switch (error.kind) {
    case ErrorKind::user: return to_int(ExitCode::usage);
    case ErrorKind::infra: return to_int(ExitCode::infra);
    case ErrorKind::internal: return to_int(ExitCode::internal);
  }
  return to_int(ExitCode::internal);
}

}  // namespace dtrain
