#include "launcher/base/base64.h"
#include "launcher/agent/flight_recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/proto/messages.h"

namespace dtrain::agent {
namespace {

// PyTorch reads the TORCH_FR_* names first in newer releases and TORCH_NCCL_* in older ones.
constexpr const char* kPipeVariables[] = {"TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"};
constexpr const char* kDumpVariables[] = {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"};
constexpr int64_t kPollMs = 50;

struct FileState {
  bool exists = false;
  off_t size = 0;
  int64_t modified_ns = 0;
  bool operator==(const FileState& other) const {
    return exists == other.exists && size == other.size && modified_ns == other.modified_ns;
  }
};

FileState file_state(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return {};
  return {true, info.st_size, static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

struct PendingDump {
  DumpTarget target;
  std::string pipe;
  std::string dump;
  FileState before;        ///< the dump file before the request (an earlier dump, or none)
  FileState last_seen;     ///< at the previous poll: a dump is complete once it stops changing
  bool requested = false;  ///< the pipe took our byte
  bool complete = false;
  std::optional<std::string> problem;
};

// The first of `names` that the assigned environment, else the agent's own, sets non-empty.
std::string first_variable(const std::map<std::string, std::string>& assigned_env, const char* const (&names)[2]) {
  for (const char* name : names) {
    auto given = assigned_env.find(name);
    if (given != assigned_env.end() && !given->second.empty()) return given->second;
  }
  for (const char* name : names) {
    const char* inherited = std::getenv(name);
    if (inherited && *inherited) return inherited;
  }
  return "";
}

// O_NONBLOCK: without a reader the open fails with ENXIO instead of waiting for one.
std::optional<std::string> request_dump(const std::string& pipe) {
  struct stat info{};
  if (::lstat(pipe.c_str(), &info) != 0) return "no debug-info pipe " + pipe;
  if (!S_ISFIFO(info.st_mode)) return pipe + " is not a fifo";
  UniqueFd fd(::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return "cannot open " + pipe + ": " + errno_text(errno);
  if (::write(fd.get(), "1\n", 2) != 2) return "cannot write to " + pipe + ": " + errno_text(errno);
  return std::nullopt;
}

proto::FlightRecorderDump reply_for(const PendingDump& pending, size_t max_bytes, const std::string& owned_directory) {
  proto::FlightRecorderDump reply;
  reply.gen = pending.target.gen;
  reply.rank = pending.target.rank;
  reply.pid = pending.target.pid;
  FileState now = file_state(pending.dump);
  if (!now.exists || now.size == 0) {
    reply.error = pending.problem.value_or("no flight-recorder dump at " + pending.dump + " in time");
    return reply;
  }
  reply.bytes = static_cast<int64_t>(now.size);
  if (static_cast<size_t>(now.size) > max_bytes) {
    reply.kept_path = pending.dump;
    return reply;
  }
  UniqueFd fd(::open(pending.dump.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  std::string data;
  bool would_block = false;
  bool read_failed = !fd.valid();
  while (!read_failed && data.size() <= max_bytes) {
    Result<size_t> got = read_some(fd.get(), data, &would_block);
    if (!got) read_failed = true;
    if (!got || *got == 0 || would_block) break;
  }
  // A dump that changed size while read, or a failed read, is not shipped as if it were whole.
  if (read_failed || data.size() > max_bytes || data.size() != static_cast<size_t>(now.size)) {
    reply.error = "cannot read " + pending.dump + " whole (" + std::to_string(data.size()) + " of " +
                     std::to_string(now.size) + " bytes)";
    return reply;
  }
  reply.bytes = static_cast<int64_t>(data.size());
  reply.data_base64 = base64_encode(data);
  bool ours = !owned_directory.empty() && pending.dump.compare(0, owned_directory.size() + 1, owned_directory + "/") == 0;
  if (ours) ::unlink(pending.dump.c_str());  // a later generation's dump must not be taken for it
  if (pending.problem) reply.note = *pending.problem + "; this dump was written earlier";
  return reply;
}

}  // namespace

DumpPaths assigned_dump_paths(const std::map<std::string, std::string>& assigned_env) {
  return {first_variable(assigned_env, kDumpVariables), first_variable(assigned_env, kPipeVariables)};
}

void add_hang_evidence_env(std::map<std::string, std::string>& env, const std::string& dump_prefix) {
  auto set_default = [&](const char* name, const std::string& value) {
    if (env.count(name) || std::getenv(name)) return;
    env[name] = value;
  };
  set_default("NCCL_DEBUG", "WARN");
  set_default("TORCH_NCCL_TRACE_BUFFER_SIZE", kFlightRecorderEntries);
  set_default("TORCH_FR_BUFFER_SIZE", kFlightRecorderEntries);
  set_default("TORCH_NCCL_DUMP_ON_TIMEOUT", "1");
  for (const char* name : kDumpVariables) set_default(name, dump_prefix);
  for (const char* name : kPipeVariables) set_default(name, dump_prefix);
}

std::vector<proto::FlightRecorderDump> collect_flight_recorder_dumps(const std::vector<DumpTarget>& targets,
                                                                     Millis timeout, size_t max_bytes,
                                                                     const std::string& owned_directory) {
  std::vector<PendingDump> pending;
  for (const DumpTarget& target : targets) {
    // No dump path assigned: nothing to look for (never a default in a world-writable /tmp).
    if (target.paths.dump_prefix.empty()) continue;
    std::optional<std::string> pipe_prefix;
    if (!target.paths.pipe_prefix.empty()) pipe_prefix = target.paths.pipe_prefix;
    // The rank the agent assigned (the RANK it put in the worker's environment), not what the
    // worker's environment says now: that is the worker's to change, and it becomes part of a path
    // this agent reads and may unlink.
    std::string rank = std::to_string(target.rank);
    std::string dump = target.paths.dump_prefix + rank;
    FileState before = file_state(dump);
    struct stat pipe_info{};
    bool has_pipe = pipe_prefix && ::lstat((*pipe_prefix + rank + ".pipe").c_str(), &pipe_info) == 0;
    // Every worker has the variables; only a process whose PyTorch flight recorder made the fifo
    // (or left a dump) is asked: a worker without it costs no wait and no event.
    if (!has_pipe && !before.exists) continue;
    if (!has_pipe) pipe_prefix.reset();
    PendingDump entry;
    entry.target = target;
    entry.pipe = pipe_prefix ? *pipe_prefix + rank + ".pipe" : "";
    entry.dump = dump;
    entry.before = entry.last_seen = before;
    if (pipe_prefix) {
      entry.problem = request_dump(entry.pipe);
      entry.requested = !entry.problem;
    }
    pending.push_back(std::move(entry));
  }
  SystemClock clock;
  int64_t deadline = clock.monotonic_ms() + timeout.count();
  for (;;) {
    bool waiting = false;
    for (PendingDump& entry : pending) {
      if (!entry.requested || entry.complete) continue;
      FileState now = file_state(entry.dump);
      // Fresh (not the file from before), non-empty, and unchanged over one poll: PyTorch writes
      // it in place with an ofstream, so a growing file is not a dump yet.
      entry.complete = now.exists && now.size > 0 && !(now == entry.before) && now == entry.last_seen;
      entry.last_seen = now;
      waiting = waiting || !entry.complete;
    }
    if (!waiting || clock.monotonic_ms() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
  }
  std::vector<proto::FlightRecorderDump> replies;
  for (PendingDump& entry : pending) {
    if (entry.requested && !entry.complete) {
      entry.problem = "no dump within " + format_duration(timeout) + " of writing to " + entry.pipe;
    }
    replies.push_back(reply_for(entry, max_bytes, owned_directory));
  }
  return replies;
}

}  // namespace dtrain::agent
