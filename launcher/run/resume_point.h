#pragma once
// `dtrain resume`'s two questions about a run whose supervisor died: where to continue from
// (the run log's generations and checkpoints, state.json's restarts and steps), and when it is
// safe to start (every agent of the old supervisor gone, so no two generations share a GPU).

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_snapshot.h"
#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/supervisor_types.h"

namespace dtrain::run {

/// The resume point from the run's state.json and events.jsonl: newest generation, committed
/// minus rejected checkpoint steps, newest step any rank reported, restarts used, the previous
/// supervisor and its last state write. supervisor_lost is true unless the state is terminal.
supervisor::ResumeFrom resume_point(const RunSnapshot& state, const std::vector<LoggedEvent>& events);

/// Blocks until no agent of the previous supervisor runs. Old agents fence themselves once they
/// hear nothing for heartbeat.timeout (local ones at once, on stdin EOF) and KILL what TERM left
/// after min(2 s, timeout); an agent exits only after reaping its workers. So each host is asked
/// (locally, or over SSH) whether its old agent still runs, never longer than
/// `last_seen_wall_ms` + timeout + min(2 s, timeout) + 0.5 s, by when the silence rule has fenced
/// every agent (a host that cannot be asked is waited out). Error (infra) when a local agent
/// still runs 10 s after that.
Status wait_until_old_agents_gone(const RunDirectory& run, const spec::JobSpec& spec, int64_t last_seen_wall_ms);

}  // namespace dtrain::run
