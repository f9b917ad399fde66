#pragma once
// Which of a generation's failures to blame when several ranks fail together: a pure rule, kept
// beside decide_recovery so that it can be read and tested alone.

#include <string>
#include <vector>

namespace dtrain::supervisor {

/// True when a failed rank's own last words say that a peer went first: dtrain-train's "peer
/// rank 0 is gone (crashed or killed?)", Gloo's "Connection closed by peer" / "Connection reset
/// by peer", NCCL's "remote process exited or there was a network error", or a communicator that
/// torch aborted because another rank failed. Such a rank is a consequence: when a rank of the
/// same generation then exits on its own with words of its own, that rank is the root cause,
/// whichever exit the agent reaped first (a rank that fails runs its destructors and closes its
/// sockets before it is a zombie, so its peers can be reaped before it is).
bool reads_as_lost_peer(const std::vector<std::string>& last_output, const std::string& detail);

}  // namespace dtrain::supervisor
