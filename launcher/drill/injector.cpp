#include "launcher/drill/injector.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "launcher/events/events.h"
#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"
#include "launcher/base/strings.h"
#include "launcher/drill/live_run.h"

namespace dtrain::drill {

namespace fs = std::filesystem;

Status send_signal(const LiveRun& run, int pid, int signal) {
  const char* abbreviation = ::sigabbrev_np(signal);
  std::string name = abbreviation ? abbreviation : std::to_string(signal);
  // Not our child: taken once, now. ProcessHandle refuses pid <= 1 as an internal bug.
  Result<ProcessHandle> target = ProcessHandle::for_process(pid);
  if (!target && target.error().kind == ErrorKind::internal) {
    (void)run.append(events::SignalRefused{pid, "SIG" + name, target.error().message}.to_json());
    return target.error();
  }
  if (!target) {
    return Error::infra("kill -" + name + " " + std::to_string(pid) +
                        ": no such process (the worker exited before the drill reached it)");
  }
  return dtrain::send_signal(*target, signal);
}

std::vector<int64_t> complete_checkpoint_steps(const std::string& checkpoint_dir) {
  std::vector<int64_t> steps;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoint_dir, error)) {
    std::string name = entry.path().filename().string();
    if (!starts_with(name, "step-")) continue;
    int64_t step = -1;
    auto [end, parse_error] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
    if (parse_error != std::errc() || end != name.data() + name.size()) continue;
    if (fs::is_regular_file(entry.path() / "MANIFEST.json", error)) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

namespace {

/// Flips one payload byte of one shard of complete step `step`; `previous` is where a resume goes.
Result<CorruptedCheckpoint> corrupt_step(const std::string& checkpoint_dir, int64_t step, int64_t previous) {
  CorruptedCheckpoint corrupted;
  corrupted.step = step;
  corrupted.previous_step = previous;
  fs::path step_dir = fs::path(checkpoint_dir) / ("step-" + std::to_string(step));
  std::vector<std::string> shards;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(step_dir, error)) {
    std::string name = entry.path().filename().string();
    if (starts_with(name, "shard-") && name.size() > 4 && name.substr(name.size() - 4) == ".bin") {
      shards.push_back(entry.path().string());
    }
  }
  if (shards.empty()) return Error::infra("corrupt-checkpoint: no shard-*.bin in '" + step_dir.string() + "'");
  std::sort(shards.begin(), shards.end());
  corrupted.file = shards.front();

  UniqueFd fd(::open(corrupted.file.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Error::infra("corrupt-checkpoint: open '" + corrupted.file + "': " + errno_text(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || info.st_size == 0) {
    return Error::infra("corrupt-checkpoint: '" + corrupted.file + "' is empty or unreadable");
  }
  // The middle of the payload (past the 56-byte header) when there is one: the damage a bad
  // disk sector would do, caught only by the payload checksum.
  constexpr int64_t kHeaderSize = 56;
  int64_t size = static_cast<int64_t>(info.st_size);
  corrupted.offset = size > kHeaderSize ? kHeaderSize + (size - kHeaderSize) / 2 : size / 2;
  unsigned char byte = 0;
  if (::pread(fd.get(), &byte, 1, corrupted.offset) != 1) {
    return Error::infra("corrupt-checkpoint: read '" + corrupted.file + "': " + errno_text(errno));
  }
  byte ^= 0xFF;
  if (::pwrite(fd.get(), &byte, 1, corrupted.offset) != 1 || ::fsync(fd.get()) != 0) {
    return Error::infra("corrupt-checkpoint: write '" + corrupted.file + "': " + errno_text(errno));
  }
  return corrupted;
}

Error too_few_checkpoints(const std::string& checkpoint_dir, size_t complete) {
  return Error::infra("corrupt-checkpoint: '" + checkpoint_dir + "' holds " + std::to_string(complete) +
                      " complete checkpoint(s); the drill needs two (one to damage, one to resume from): "
                      "lower checkpoint.interval_steps or inject later with --at-step");
}

}  // namespace

Result<CorruptedCheckpoint> corrupt_newest_checkpoint(const std::string& checkpoint_dir) {
  std::vector<int64_t> steps = complete_checkpoint_steps(checkpoint_dir);
  if (steps.size() < 2) return too_few_checkpoints(checkpoint_dir, steps.size());
  return corrupt_step(checkpoint_dir, steps[0], steps[1]);
}

Result<std::vector<CorruptedCheckpoint>> corrupt_checkpoints_from(const std::string& checkpoint_dir,
                                                                  int64_t oldest) {
  std::vector<int64_t> steps = complete_checkpoint_steps(checkpoint_dir);  // newest first
  size_t damage = 1;
  while (damage < steps.size() && steps[damage] >= oldest) ++damage;
  if (steps.size() < damage + 1) return too_few_checkpoints(checkpoint_dir, steps.size());
  std::vector<CorruptedCheckpoint> corrupted;
  for (size_t i = 0; i < damage; ++i) {
    Result<CorruptedCheckpoint> one = corrupt_step(checkpoint_dir, steps[i], steps[damage]);
    if (!one) return one.error();
    corrupted.push_back(*one);
  }
  return corrupted;
}

}  // namespace dtrain::drill
