#include "launcher/supervisor/supervisor_types.h"

namespace dtrain::supervisor {

const char* to_string(RunState state) {
  switch (state) {
    case RunState::connecting: return "connecting";
    case RunState::launching: return "launching";
    case RunState::running: return "running";
    case RunState::recovering: return "recovering";
    case RunState::stopping: return "stopping";
    case RunState::succeeded: return "succeeded";
    case RunState::failed: return "failed";
    case RunState::stopped: return "stopped";
    case RunState::preempted: return "preempted";
  }
  return "unknown";
}

bool is_terminal(RunState state) {
  return state == RunState::succeeded || state == RunState::failed || state == RunState::stopped ||
         state == RunState::preempted;
}

const char* to_string(RankState state) {
  switch (state) {
    case RankState::pending: return "pending";
    case RankState::starting: return "starting";
    case RankState::running: return "running";
    case RankState::exited: return "exited";
    case RankState::failed: return "failed";
    case RankState::killed: return "killed";
  }
  return "unknown";
}

}  // namespace dtrain::supervisor
