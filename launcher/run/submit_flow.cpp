// `dtrain submit`: load and check the spec, plan, create the run directory and its first
// events, go to the background when asked, and run a driver to the end.

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/base/identity.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/run/created_pods.h"
#include "launcher/run/driver.h"
#include "launcher/run/governance.h"
#include "launcher/run/quarantine_gate.h"
#include "launcher/registry/registry_db.h"
#include "launcher/events/events.h"

namespace dtrain::run {

using nlohmann::json;

std::optional<int> detach(const std::string& run_id, const char* what, const RunLock& lock) {
  std::fflush(stdout);
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "dtrain: fork: %s\n", errno_text(errno).c_str());
    return to_int(ExitCode::infra);
  }
  if (child > 0) {
    std::printf("%s\n", run_id.c_str());
    std::fprintf(stderr, "dtrain: run %s %s in the background (supervisor pid %d)\n"
                         "  dtrain status %s · dtrain logs %s --follow · dtrain stop %s\n",
                 run_id.c_str(), what, child, run_id.c_str(), run_id.c_str(), run_id.c_str());
    return to_int(ExitCode::ok);
  }
  ::setsid();
  // The parent exits at once; `dtrain resume` and status must name this process as the holder.
  (void)lock.record_holder();
  (void)redirect_to_dev_null({STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO});
  return std::nullopt;
}

Console::Mode console_mode(bool detached) {
  if (detached) return Console::Mode::quiet;
  return ::isatty(STDERR_FILENO) ? Console::Mode::terminal : Console::Mode::plain;
}

std::string output_clause(const WorkerEcho& echo) {
  return echo.choice == OutputChoice::none ? "" : " · output: " + echo.describe();
}

std::string this_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) return path;
  return std::string(cwd) + "/" + path;
}

int submit(const SubmitOptions& options) {
  SystemClock clock;
  spec::LoadResult loaded =
      options.spec_text ? spec::parse_job_spec(*options.spec_text, options.spec_path, absolute_path("."), options.overrides)
                        : spec::load_job_spec(options.spec_path, options.overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.message().c_str());
    return to_int(ExitCode::usage);
  }
  for (const spec::Diagnostic& warning : loaded.warnings) std::fprintf(stderr, "warning: %s\n", warning.to_string().c_str());
  spec::JobSpec spec = std::move(*loaded.spec);
  if (spec.worker.workdir.empty()) spec.worker.workdir = absolute_path(".");
  if (!spec.checkpoint.dir.empty()) spec.checkpoint.dir = absolute_path(spec.checkpoint.dir);
  std::string command = "dtrain " + options.audit_action;
  // Before any pod: kubernetes.job names what it creates after the run. No run directory yet: a
  // submit that fails from here on leaves none, and deletes what it created (`created` below).
  std::string run_id = make_run_id(spec.name.empty() ? "job" : spec.name, clock.wall_ms());
  std::optional<hosts::CreatedJob> created;  // kubernetes.job: deleted on every early return
  if (spec.kubernetes.enabled && spec.hosts.empty()) {  // hosts: kubernetes: the pods are the hosts
    Result<std::optional<hosts::CreatedJob>> pods = take_kubernetes_hosts(spec, run_id);
    if (!pods) {
      std::fprintf(stderr, "%s: %s\n", options.spec_path.c_str(), pods.error().message.c_str());
      return to_int(ExitCode::usage);
    }
    created = std::move(pods).value();
  }
  QuarantineGate quarantine = read_quarantine_gate(spec, registry::registry_path(), clock.wall_ms());
  print_quarantine_gate(quarantine, command);
  Result<plan::RankPlan> plan = plan_without_quarantined(spec, quarantine);
  if (!plan) {
    std::fprintf(stderr, "%s: %s\n", options.spec_path.c_str(), plan.error().message.c_str());
    return to_int(ExitCode::usage);
  }

  // `dtrain run` passes its command line as spec_text: it has no intent: to give.
  Admission admission = admit_under_quota(spec, options.over_quota, command, options.audit_action,
                                          options.spec_text ? IntentPolicy::not_applicable : IntentPolicy::enforced);
  if (admission.refused_exit_code) return *admission.refused_exit_code;
  // The site's own health check and diagnostics, where the spec names none; kept in the run's
  // spec so a resume checks the same way.
  if (admission.site) spec::apply_site_health(*admission.site, spec.health);

  Result<RunDirectory> run = RunDirectory::create(run_id);
  if (!run) {
    std::fprintf(stderr, "dtrain: %s\n", run.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  // Before anything is written in the run directory, and held until this process ends.
  Result<RunLock> lock = RunLock::acquire(*run);
  if (!lock) {
    std::fprintf(stderr, "dtrain: %s\n", lock.error().message.c_str());
    return to_int(lock.error().kind == ErrorKind::user ? ExitCode::usage : ExitCode::infra);
  }
  // The spec first: without it the run could never be resumed, so a run that cannot keep it does
  // not start, and leaves no directory that would list as a run.
  if (Status kept = write_file_atomic(run->spec_path(), spec::to_yaml(spec_to_keep(spec))); !kept) {
    std::error_code removed;
    std::filesystem::remove_all(run->path(), removed);
    std::fprintf(stderr,
                 "dtrain: %s; the run was not started, as it could never be resumed without its spec%s; free space "
                 "or fix the runs directory %s and submit again\n",
                 kept.error().message.c_str(),
                 removed ? (" (" + run->path() + " could not be removed: " + removed.message() + ")").c_str() : "",
                 runs_root().c_str());
    return to_int(ExitCode::infra);
  }
  Result<EventLog> events = EventLog::create(run->events_path(), run_id, clock.wall_ms());
  if (!events) {
    std::fprintf(stderr, "dtrain: %s\n", events.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  std::vector<std::string> hosts;
  for (const spec::HostEntry& host : spec.hosts) hosts.push_back(host.name);
  events::RunSubmitted submitted{run_id,
                                 spec.name,
                                 spec.tenant,
                                 run_owner(),
                                 options.spec_text ? run->spec_path() : absolute_path(options.spec_path),
                                 std::move(hosts),
                                 plan->world_size,
                                 kVersion,
                                 ::getpid(),
                                 this_hostname(),
                                 options.detach};
  (void)events->append(submitted.to_json(), clock.wall_ms());
  if (created) (void)events->append(created_event(*created, spec.kubernetes.job->pods).to_json(), clock.wall_ms());
  if (!quarantine.left_out.empty()) (void)events->append(quarantine.event().to_json(), clock.wall_ms());

  json arguments = {{"tenant", spec.tenant}, {"hosts", plan->hosts.size()}, {"world_size", plan->world_size},
                    {"detach", options.detach}, {"over_quota", options.over_quota}};
  for (const spec::Override& set : options.overrides) arguments["set"].push_back(set.key + "=" + set.value);
  audit_action(command, options.audit_action, run_id,
               options.spec_text ? "command line" : absolute_path(options.spec_path), std::move(arguments),
               admission.quota_note.empty() ? "started" : "started; " + admission.quota_note, &spec);

  if (options.detach) {
    if (std::optional<int> parent_exit = detach(run_id, "started", *lock)) {
      if (created) created->release();  // the background supervisor deletes them
      return *parent_exit;
    }
  }
  WorkerEcho echo{options.output, plan->world_size};
  if (!options.detach) {
    std::fprintf(stderr, "dtrain: run %s · %d workers on %zu host(s) · run log %s%s\n", run_id.c_str(),
                 plan->world_size, plan->hosts.size(), run->path().c_str(), output_clause(echo).c_str());
  }

  RunDriver driver(spec, std::move(plan).value(), std::move(run).value(), std::move(events).value(),
                   options.dtrain_exe, options.detach, Console(console_mode(options.detach), stderr, echo), options.seams);
  if (created) driver.own_created_job(std::move(*created));
  int code = driver.run();
  if (options.detach) std::_Exit(code);
  return code;
}

}  // namespace dtrain::run
