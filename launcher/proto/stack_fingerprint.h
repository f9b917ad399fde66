#pragma once
// The software-stack fingerprint (issue 29 "one software stack"): what the supervisor asks an
// agent to fingerprint (config.stack: the worker command as that host will run it) and what the
// agent answers (hello.stack). One struct each way, one to_json and one non-throwing parser;
// the driver turns the answer into host.stack's items (stack_items) and the supervisor compares
// those (launcher/events/stack_comparison.h).
//
// A value that could not be read is "unknown" or "unknown (why)"; one that does not exist on
// the host is "none" (no NVIDIA driver, no libnccl, torch not installed), which is a value like
// any other: a host without torch differs from hosts with it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain::proto {

/// What the agent may spend on the worker interpreter's version probe (a hung python must not
/// hang the launch): past it the probe's process group is killed and python/torch are unknown.
inline constexpr int64_t kDefaultStackProbeTimeoutMs = 5'000;
/// Bounds on what an agent may send back.
inline constexpr size_t kMaxStackValueBytes = 512;
inline constexpr size_t kMaxStackFiles = 16;
inline constexpr size_t kMaxStackNotes = 16;

/// config.stack: the worker command as this host runs it.
struct StackProbeRequest {
  std::vector<std::string> argv{};            ///< the spec's worker.command (never empty)
  std::optional<std::string> workdir{};       ///< where relative paths are resolved
  std::map<std::string, std::string> env{};   ///< the spec's worker.env (PATH, PYTHONPATH, ...)
  int64_t timeout_ms = kDefaultStackProbeTimeoutMs;
  bool operator==(const StackProbeRequest&) const = default;
};

/// One file of the worker command (a script argument that exists, or the program itself).
struct StackFile {
  std::string path{};    ///< as the command names it ("train.py"), so hosts compare by it
  std::string sha256{};  ///< lowercase hex, or "unknown (why)" (too large, unreadable)
  bool operator==(const StackFile&) const = default;
};

/// hello.stack.
struct StackFingerprint {
  std::string os = "unknown";          ///< /etc/os-release PRETTY_NAME
  std::string kernel = "unknown";      ///< uname -r
  std::string gpu_driver = "unknown";  ///< NVIDIA kernel module version, or "none"
  std::string cuda = "unknown";        ///< the CUDA toolkit/runtime found on the host, or "none"
  std::string nccl = "unknown";        ///< the libnccl found on the host's library path, or "none"
  /// The worker's interpreter (absent: the command is not a Python one) and the packages its
  /// sys.path finds, each a version or "none".
  std::optional<std::string> python{};
  std::optional<std::string> torch{};
  std::optional<std::string> python_nccl{};  ///< nvidia-nccl-cu* (what a pip torch loads)
  std::optional<std::string> python_cuda{};  ///< nvidia-cuda-runtime-cu*
  std::string image = "unknown";  ///< the container image's digest, "none" outside a container
  std::vector<StackFile> files{};
  int64_t ms = 0;                     ///< how long gathering took on the host
  std::vector<std::string> notes{};   ///< why something is unknown
  bool operator==(const StackFingerprint&) const = default;
};

nlohmann::json to_json(const StackProbeRequest& request);
nlohmann::json to_json(const StackFingerprint& fingerprint);

/// Never throw; the error names the field ("stack.files[2].path: ...").
Result<StackProbeRequest> parse_stack_probe_request(const nlohmann::json& object);
Result<StackFingerprint> parse_stack_fingerprint(const nlohmann::json& object);

/// The fingerprint as named items in a fixed order ("os", "kernel", "gpu driver", "cuda",
/// "nccl", "python", "torch", "nccl (python)", "cuda runtime (python)", "image", then "file
/// <path>" for each file): host.stack's items, which every reader shows and compares.
std::vector<std::pair<std::string, std::string>> stack_items(const StackFingerprint& fingerprint);

}  // namespace dtrain::proto
