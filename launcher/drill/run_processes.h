#pragma once
// Which processes belong to a run, read straight from /proc: every worker (and whatever it
// started) carries DTRAIN_RUN_ID=<run id> in its environment, wherever it was reparented. The
// drill's cleanup check and its "old generation gone" check use this, not the agent's word.

#include <string>
#include <vector>

#include "launcher/base/duration.h"

namespace dtrain::drill {

/// Live (non-zombie) processes of this user whose environment holds DTRAIN_RUN_ID=<run_id>.
std::vector<int> processes_of_run(const std::string& run_id);

/// True while `pid` exists and is not a zombie.
bool process_alive(int pid);

/// The pids of `pids` still alive after waiting up to `timeout` for them to go.
std::vector<int> wait_until_gone(const std::vector<int>& pids, Millis timeout);

/// processes_of_run(run_id) after waiting up to `timeout` for it to become empty.
std::vector<int> wait_until_run_gone(const std::string& run_id, Millis timeout);

}  // namespace dtrain::drill
