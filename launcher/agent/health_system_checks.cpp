// The host health checks that start something and wait for it, each bounded by its limit: the
// checkpoint directory's write (on a thread of its own, given up at write_timeout), the site's
// command and diagnostics (a child process group, killed at its timeout), and leftover GPU
// memory (looked at again until reclaim_wait). See health_checks.h.

#include "launcher/agent/health_checks.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "launcher/agent/resource_sampler.h"
#include "launcher/base/child_process.h"
#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"

namespace dtrain::agent {

using proto::HealthCheck;
using proto::HealthVerdict;

namespace {

constexpr size_t kProbeBytes = 4096;
constexpr size_t kShownOutputBytes = 1024;   // of a site command's output, in its check's message
constexpr int64_t kAfterExitGraceMs = 100;   // output a command's background job writes last
constexpr int64_t kLeftoverPollMs = 500;     // between two looks at leftover GPU memory

std::string duration_text(int64_t ms) { return format_duration(Millis(ms)); }

// ---- checkpoint directory ---------------------------------------------------------------------

/// A probe that may still be blocked in the filesystem. Shared by the check (which gives up at
/// its limit) and the thread (which may never return): neither outlives the other's use of it.
struct CheckpointProbe {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  HealthCheck result;
  int64_t started_ms = 0;
};

/// Probes still running, by directory: a directory whose last probe hangs gets no second
/// thread stuck beside the first. Never destroyed: a hung thread may finish during exit.
struct RunningProbes {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<CheckpointProbe>> by_directory;
};
RunningProbes& running_probes() {
  static RunningProbes* probes = new RunningProbes();
  return *probes;
}

HealthCheck probe_checkpoint_dir(const std::string& directory, int64_t min_free_mb) {
  HealthCheck check{"checkpoint dir", HealthVerdict::fail, ""};
  std::string where = "'" + printable(directory, 512) + "'";
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    check.message = "cannot create " + where + ": " + error.message() + "; fix: its parent's permissions or mount";
    return check;
  }
  SystemClock clock;
  int64_t started = clock.monotonic_ms();
  std::string path = directory + "/" + kCheckpointProbeName;
  UniqueFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!file.valid()) {
    check.message = "cannot write in " + where + ": " + errno_text(errno) +
                    "; fix: its permissions, or a read-only or full filesystem";
    return check;
  }
  std::string bytes(kProbeBytes, 'd');
  Status written = write_all(file.get(), bytes);
  int synced = written ? ::fsync(file.get()) : 0;
  int sync_errno = errno;
  file.reset();
  ::unlink(path.c_str());
  if (!written || synced != 0) {
    check.message = "writing " + std::to_string(kProbeBytes) + " bytes in " + where + " failed: " +
                    (!written ? written.error().message : "fsync: " + errno_text(sync_errno)) +
                    "; fix: the filesystem (full, read-only, or its server failing)";
    return check;
  }
  int64_t write_ms = clock.monotonic_ms() - started;
  struct statvfs space {};
  if (::statvfs(directory.c_str(), &space) != 0) {
    check.message = "statvfs " + where + ": " + errno_text(errno);
    return check;
  }
  int64_t free_mb = static_cast<int64_t>(static_cast<unsigned long long>(space.f_bavail) * space.f_frsize >> 20);
  if (free_mb < min_free_mb) {
    check.message = "only " + std::to_string(free_mb) + " MiB free in " + where + " (health.min_free: " +
                    std::to_string(min_free_mb) + " MiB); fix: free space there, or lower health.min_free";
    return check;
  }
  check.verdict = HealthVerdict::ok;
  check.message = "writable (" + std::to_string(kProbeBytes) + " bytes written and fsynced in " +
                  std::to_string(write_ms) + " ms), " + std::to_string(free_mb) + " MiB free";
  return check;
}

// ---- site commands ----------------------------------------------------------------------------

/// The output as one line for a message: newlines become " | ", the rest through printable().
std::string shown_output(const std::string& output) {
  std::string text(trim(output));
  std::string joined;
  for (const std::string& line : split(text, '\n')) {
    std::string_view trimmed = trim(line);
    if (trimmed.empty()) continue;
    if (!joined.empty()) joined += " | ";
    joined += trimmed;
  }
  return printable(joined, kShownOutputBytes);
}

std::string with_output(const std::string& what, const SiteCommandResult& result) {
  std::string shown = shown_output(result.output);
  return shown.empty() ? what + " (no output)" : what + ": " + shown;
}

/// How it ended, for a warning: "timed out after 30s", "killed by SIGSEGV", "exited with code 2".
std::string ending_text(const SiteCommandResult& result, int64_t timeout_ms) {
  switch (result.ending) {
    case SiteCommandResult::Ending::exited: return "exited with code " + std::to_string(result.exit_code);
    case SiteCommandResult::Ending::signalled: {
      const char* name = sigabbrev_np(result.signal);
      return "killed by " + (name ? std::string("SIG") + name : "signal " + std::to_string(result.signal));
    }
    case SiteCommandResult::Ending::timed_out: return "did not finish within " + duration_text(timeout_ms) + " (killed)";
    case SiteCommandResult::Ending::stopped: return "was stopped: the agent is exiting";
    case SiteCommandResult::Ending::not_started: return "could not be started (" + result.error + ")";
  }
  return "ended";
}

}  // namespace

HealthCheck check_checkpoint_dir(const std::string& directory, int64_t write_timeout_ms, int64_t min_free_mb) {
  SystemClock clock;
  std::string where = "'" + printable(directory, 512) + "'";
  RunningProbes& probes = running_probes();
  auto probe = std::make_shared<CheckpointProbe>();
  probe->started_ms = clock.monotonic_ms();
  {
    std::lock_guard<std::mutex> lock(probes.mutex);
    auto running = probes.by_directory.find(directory);
    // One that has just finished (its thread not yet out of the map) is no hang.
    bool finished = running != probes.by_directory.end() && [&] {
      std::lock_guard<std::mutex> probe_lock(running->second->mutex);
      return running->second->done;
    }();
    if (running != probes.by_directory.end() && !finished) {
      int64_t age = clock.monotonic_ms() - running->second->started_ms;
      return {"checkpoint dir", HealthVerdict::fail,
              "the previous write probe of " + where + ", started " + duration_text(age) +
                  " ago, still has not returned: the filesystem hangs; fix: its mount (NFS/Lustre server, "
                  "`mount`), then try again"};
    }
    probes.by_directory[directory] = probe;
  }
  std::thread([probe, directory, min_free_mb] {
    HealthCheck result = probe_checkpoint_dir(directory, min_free_mb);
    {
      std::lock_guard<std::mutex> lock(probe->mutex);
      probe->result = std::move(result);
      probe->done = true;
    }
    probe->finished.notify_all();
    RunningProbes& all = running_probes();
    std::lock_guard<std::mutex> lock(all.mutex);
    auto entry = all.by_directory.find(directory);
    if (entry != all.by_directory.end() && entry->second == probe) all.by_directory.erase(entry);
  }).detach();  // a write blocked in a hung filesystem cannot be interrupted; it is left behind
  std::unique_lock<std::mutex> lock(probe->mutex);
  if (probe->finished.wait_for(lock, std::chrono::milliseconds(write_timeout_ms), [&] { return probe->done; })) {
    return probe->result;
  }
  return {"checkpoint dir", HealthVerdict::fail,
          "a " + std::to_string(kProbeBytes) + "-byte write + fsync in " + where + " did not answer within " +
              duration_text(write_timeout_ms) + ": the filesystem hangs; fix: its mount (NFS/Lustre server, `mount`), "
              "or raise health.write_timeout"};
}

SiteCommandResult run_site_command(const std::string& command, int64_t timeout_ms, int stop_fd) {
  SiteCommandResult result;
  // Shared: the agent's loop then reaps only its workers by pid, not this child (resource_sampler.h).
  std::shared_lock<std::shared_mutex> helper_child(helper_child_lock());
  PipedChild::Options options;
  options.own_process_group = true;  // the timeout kills what it started too
  options.kill_with_parent = true;
  Result<PipedChild> started = PipedChild::spawn({"/bin/sh", "-c", command}, options);
  if (!started) {
    result.error = started.error().message;
    return result;
  }
  PipedChild& child = *started;
  child.close_input();
  SystemClock clock;
  const int64_t deadline = clock.monotonic_ms() + timeout_ms;
  std::string out;
  std::string err;
  auto collect = [&] {
    // Kept up to the bound, the rest read and dropped: a chatty command must not block on its pipe.
    std::string more_out = child.take_stdout();
    std::string more_err = child.take_stderr();
    if (out.size() < kMaxSiteOutputBytes) out += more_out.substr(0, kMaxSiteOutputBytes - out.size());
    if (err.size() < kMaxSiteOutputBytes) err += more_err.substr(0, kMaxSiteOutputBytes - err.size());
  };
  int64_t exited_ms = -1;
  for (;;) {
    if (exited_ms < 0 && child.reaped()) exited_ms = clock.monotonic_ms();
    child.pump();
    collect();
    int64_t now = clock.monotonic_ms();
    // Its exit ends it (a daemon it started may hold the pipes for ever), after a short grace.
    if (exited_ms >= 0 && (child.output_closed() || now - exited_ms >= kAfterExitGraceMs)) break;
    if (exited_ms < 0 && now >= deadline) {
      result.ending = SiteCommandResult::Ending::timed_out;
      break;
    }
    std::vector<pollfd> fds = child.poll_fds();
    if (int exit_fd = child.handle().exit_fd(); exited_ms < 0 && exit_fd >= 0 &&
        std::none_of(fds.begin(), fds.end(), [&](const pollfd& entry) { return entry.fd == exit_fd; })) {
      fds.push_back({exit_fd, POLLIN, 0});
    }
    if (stop_fd >= 0) fds.push_back({stop_fd, POLLIN, 0});
    int64_t left = (exited_ms >= 0 ? exited_ms + kAfterExitGraceMs : deadline) - now;
    ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left, 1, 200)));
    if (stop_fd >= 0 && (fds.back().revents & (POLLIN | POLLHUP)) != 0) {
      result.ending = SiteCommandResult::Ending::stopped;
      break;
    }
  }
  child.terminate(0);  // its group, when it has not exited (a timeout, a stop)
  collect();
  std::string trimmed_err(trim(err));
  result.output = out + (trimmed_err.empty() ? "" : (out.empty() ? "" : "\n") + trimmed_err);
  if (result.ending == SiteCommandResult::Ending::not_started) {
    int status = child.wait_status().value_or(0);
    if (WIFEXITED(status)) {
      result.ending = SiteCommandResult::Ending::exited;
      result.exit_code = WEXITSTATUS(status);
    } else {
      result.ending = SiteCommandResult::Ending::signalled;
      result.signal = WTERMSIG(status);
    }
  }
  return result;
}

bool looks_like_text(const std::string& bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) return false;
      ++i;
      continue;
    }
    size_t length = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (length == 0 || c == 0xC0 || c == 0xC1 || i + length > bytes.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(bytes[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

HealthCheck judge_site_command(const SiteCommandResult& result, int64_t timeout_ms) {
  HealthCheck check{"site command", HealthVerdict::warn, ""};
  const bool exited = result.ending == SiteCommandResult::Ending::exited;
  if (!looks_like_text(result.output)) {
    check.message = "its output is not text (" + ending_text(result, timeout_ms) +
                    "); the host is let in (fail open): fix the command (health.command): " + shown_output(result.output);
  } else if (exited && result.exit_code == 0) {
    check.verdict = HealthVerdict::ok;
    check.message = with_output("exit 0", result);
  } else if (exited && result.exit_code == 1) {
    check.verdict = HealthVerdict::fail;
    check.message = with_output("unhealthy (exit 1)", result);
  } else {
    check.message = with_output(ending_text(result, timeout_ms) + "; the host is let in (fail open); health.command "
                                "exits 0 for healthy, 1 for unhealthy",
                                result);
  }
  return check;
}

HealthCheck judge_site_diagnose(const SiteCommandResult& result, int64_t timeout_ms) {
  HealthCheck check{"site diagnose", HealthVerdict::warn, ""};
  if (result.ending == SiteCommandResult::Ending::exited) {
    check.verdict = result.exit_code == 0 ? HealthVerdict::ok : HealthVerdict::fail;
    check.message = with_output(result.exit_code == 0 ? std::string("passed (exit 0)")
                                                      : "failed (exit " + std::to_string(result.exit_code) + ")",
                                result);
  } else {
    check.message = with_output(ending_text(result, timeout_ms) + "; the host is let in (health.diagnose)", result);
  }
  return check;
}

std::vector<HealthCheck> check_leftover_gpu_memory(const LeftoverMemorySource& source, int64_t limit_mb,
                                                   int64_t reclaim_wait_ms) {
  struct Look {
    bool listed = false;                     // NVML could list the GPU's processes
    int64_t others_mb = 0;                   // known memory of processes that are not ours
    std::vector<std::string> holders;        // "pid 1234 (20480 MiB)"
    std::vector<int64_t> unmeasured;         // others' pids NVML gives no amount for
  };
  auto look = [&](int gpu, const std::set<int64_t>& own) {
    Look result;
    std::optional<std::vector<GpuProcess>> processes = source.processes(gpu);
    if (!processes) return result;
    result.listed = true;
    for (const GpuProcess& process : *processes) {
      if (own.count(process.pid)) continue;
      if (!process.used_mb) {
        result.unmeasured.push_back(process.pid);
        continue;
      }
      result.others_mb += *process.used_mb;
      result.holders.push_back("pid " + std::to_string(process.pid) + " (" + std::to_string(*process.used_mb) + " MiB)");
    }
    return result;
  };
  const int64_t started = source.now_ms();
  std::vector<Look> looks(static_cast<size_t>(std::max(source.gpu_count, 0)));
  for (;;) {
    std::set<int64_t> own = source.own_pids();
    bool over = false;
    for (int gpu = 0; gpu < source.gpu_count; ++gpu) {
      looks[static_cast<size_t>(gpu)] = look(gpu, own);
      over = over || looks[static_cast<size_t>(gpu)].others_mb > limit_mb;
    }
    int64_t waited = source.now_ms() - started;
    if (!over || waited >= reclaim_wait_ms) break;
    if (!source.pause(std::min(kLeftoverPollMs, reclaim_wait_ms - waited))) break;
  }
  const int64_t waited = source.now_ms() - started;
  std::vector<HealthCheck> checks;
  for (int gpu = 0; gpu < source.gpu_count; ++gpu) {
    const Look& found = looks[static_cast<size_t>(gpu)];
    HealthCheck check{"gpu " + std::to_string(gpu) + " memory", HealthVerdict::ok, ""};
    std::string limit = " (health.leftover_gpu_memory: " + std::to_string(limit_mb) + " MiB)";
    if (!found.listed) {
      check.verdict = HealthVerdict::warn;
      check.message = "NVML cannot list this GPU's processes here, so leftover memory is not checked (its total "
                      "use cannot tell whose memory it is)";
    } else if (found.others_mb > limit_mb) {
      check.verdict = HealthVerdict::fail;
      check.message = std::to_string(found.others_mb) + " MiB held by processes that are not this run's: " +
                      join(found.holders, ", ") + ", still after waiting " + duration_text(waited) + limit +
                      "; fix: end them (a previous job's?), or raise health.leftover_gpu_memory";
    } else if (!found.unmeasured.empty()) {
      std::vector<std::string> pids;
      for (int64_t pid : found.unmeasured) pids.push_back(std::to_string(pid));
      check.verdict = HealthVerdict::warn;
      check.message = "processes that are not this run's use it (pid " + join(pids, ", ") +
                      ") but NVML does not say how much memory they hold; not checked";
    } else {
      check.message = found.holders.empty() ? "no other process holds memory on it"
                                            : std::to_string(found.others_mb) + " MiB held by other processes" + limit;
      if (waited > 0 && !found.holders.empty()) check.message += ", after waiting " + duration_text(waited);
      else if (waited > 0) check.message += " (freed within " + duration_text(waited) + ")";
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace dtrain::agent
