#pragma once
// `dtrain submit`: load the spec, plan, create the run directory, start one agent per host and
// run the supervisor's event loop until the run ends. The only place where transport, proto,
// supervisor, run log and store meet.

#include <string>
#include <vector>

#include "launcher/spec/spec_loader.h"

namespace dtrain::run {

struct SubmitOptions {
  std::string spec_path;
  std::vector<spec::Override> overrides;
  bool detach = false;        ///< print the run id and go on in the background
  std::string dtrain_exe;     ///< absolute path of this dtrain binary (agents run it)
};

/// Runs a job to its end; returns the process exit code (launcher/base/exit_code.h). With
/// `detach`, returns 0 in the foreground process as soon as the run directory exists.
int submit(const SubmitOptions& options);

}  // namespace dtrain::run
