#pragma once
// Running a short-lived command (the drill's own `dtrain submit --detach`) to its end with its
// output captured. The child is owned: killed and reaped if it outlives its timeout.

#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"

namespace dtrain::drill {

struct CommandOutput {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

/// Runs `argv` (no shell; argv[0] is a path) with stdin from /dev/null, capturing stdout and
/// stderr. Past `timeout` the child is SIGKILLed and the result is an error (infra).
Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout);

}  // namespace dtrain::drill
