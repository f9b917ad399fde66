#pragma once
// The end of a run as a person reads it (run_summary.cpp): the run.finished event and the
// foreground summary of what failed, where, why, and where the run log is.

#include <cstdint>
#include <cstdio>

#include "launcher/events/events.h"
#include "launcher/run/console.h"
#include "launcher/run/frame_router.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

/// run.finished: state, exit code, restarts, generations, incidents and the root cause.
events::RunFinished run_finished_event(const supervisor::Supervisor& supervisor, const supervisor::FinishRun& finish,
                                       int64_t elapsed_ms);

/// The summary on `out`: the root cause with its log, traceback and last output (the router's
/// exit tails), why the run could not go on, every incident, where the run log is — and, when
/// the terminal showed the output of some ranks only, that every rank's is there.
void print_run_summary(std::FILE* out, const supervisor::Supervisor& supervisor, const supervisor::FinishRun& finish,
                       const RunDirectory& run, const FrameRouter& router, int64_t elapsed_ms,
                       const WorkerEcho& echo = {});

}  // namespace dtrain::run
