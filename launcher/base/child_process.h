#pragma once
// Running a short-lived command to its end with its output captured (drills: their own
// `dtrain submit --detach`, cut/heal commands; hosts: a shell on a local host). The child is owned: killed and reaped if it outlives its timeout.

#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"

namespace dtrain {

struct CommandOutput {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

/// Runs `argv` (no shell; argv[0] is a path) with stdin from /dev/null, capturing stdout and
/// stderr. Past `timeout` the child is SIGKILLed and the result is an error (infra).
Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout);

}  // namespace dtrain
