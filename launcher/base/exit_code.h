#pragma once
// Process exit codes of every dtrain subcommand. Documented in man/dtrain.1 (EXIT STATUS);
// scripts and cron jobs depend on them, so values never change meaning.

namespace dtrain {

enum class ExitCode : int {
  ok = 0,            ///< the job (or subcommand) succeeded
  job_failed = 1,    ///< a worker failed and the failure budget is spent (or no elastic settings)
  usage = 2,         ///< bad command line, invalid spec, unknown run
  infra = 3,         ///< could not start: host unreachable, agent failed, run directory unwritable
  crash_loop = 4,    ///< no step progress across consecutive generations
  hosts_lost = 5,    ///< fewer than elastic.min_hosts hosts remain
  internal = 70,     ///< a bug in dtrain (EX_SOFTWARE)
  interrupted = 130  ///< stopped by Ctrl-C, SIGTERM or `dtrain stop`
};

inline int to_int(ExitCode code) { return static_cast<int>(code); }

}  // namespace dtrain
