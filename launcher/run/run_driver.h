#pragma once
// `dtrain submit` and `dtrain resume`: the run module's public face. Load the spec, plan, create
// the run directory, start one agent per host and run the supervisor's event loop (driver.h)
// until the run ends. The only module where transport, proto, supervisor, run log and store meet.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run/console.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain {
class Clock;
}
namespace dtrain::transport {
class Transport;
}

namespace dtrain::run {

/// Where a driver meets the world, replaceable by tests and dtrain-sim. Defaults: the real thing.
struct DriverSeams {
  /// The supervisor's and driver's clock (not owned; must outlive the run). Null: the system
  /// clock. A test with a FakeClock moves time past heartbeat and hang deadlines at once.
  const Clock* clock = nullptr;
  /// Every host's agent through this transport instead of local/ssh (sim::FakeCluster). Not
  /// owned; must outlive the run.
  transport::Transport* transport = nullptr;
  /// Plan a relay tree (spec scale:) over `transport`'s hosts as if they were reached over SSH
  /// (dtrain-sim --tree: FakeCluster relays).
  bool relay_over_transport = false;
  /// Runs on the run log's writer thread before each write (a test stalls the file system).
  std::function<void()> before_runlog_write;
};

struct SubmitOptions {
  std::string spec_path;
  /// `dtrain run`: the spec as YAML text built from its command line, loaded by the same
  /// loader instead of reading `spec_path`, which then only names it in messages. Relative
  /// paths in it resolve against the working directory.
  std::optional<std::string> spec_text;
  std::vector<spec::Override> overrides;
  bool detach = false;        ///< print the run id and go on in the background
  std::string dtrain_exe;     ///< absolute path of this dtrain binary (agents run it)
  bool over_quota = false;    ///< start even when the tenant's monthly budget is spent (audited)
  /// Which ranks' output the terminal shows (dtrain run: automatic; dtrain submit: none unless
  /// --follow or --output). Nothing when detached.
  OutputChoice output = OutputChoice::none;
  /// The audit row: "submit", or "run" (whose spec_path names a command line, not a file).
  std::string audit_action = "submit";
  DriverSeams seams;
};

/// Runs a job to its end; returns the process exit code (launcher/base/exit_code.h). With
/// `detach`, returns 0 in the foreground process as soon as the run directory exists.
int submit(const SubmitOptions& options);

struct ResumeOptions {
  std::string run;            ///< run id or unique prefix
  bool detach = false;
  std::string dtrain_exe;
  bool over_quota = false;    ///< as SubmitOptions::over_quota
  OutputChoice output = OutputChoice::none;  ///< as SubmitOptions::output
};

/// `dtrain resume RUN`: continues a run whose supervisor died (kill -9, a crashed login node)
/// or that ended stopped or failed, in the same run directory, from its newest complete
/// checkpoint. Refuses (usage) a run that does not exist, succeeded, or still has a live
/// supervisor. Waits until the old agents must have fenced themselves (their supervisor's
/// last state write + heartbeat.timeout + the fence's KILL grace) so that no worker of the old
/// supervisor can overlap the new generation. Returns like submit().
int resume(const ResumeOptions& options);

}  // namespace dtrain::run
