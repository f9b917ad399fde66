#pragma once
// The agent's software-stack fingerprint (config.stack → hello.stack; proto/stack_fingerprint.h):
// what this host would run the worker command with. Everything it reads is bounded: small files
// through regular_file.h, the worker's interpreter run once with a short `-c` that lists package
// versions from sys.path (the same dist-info/egg-info search importlib.metadata makes, without
// importing it or torch: ~20 ms instead of ~150) and is killed with its process group past the
// request's timeout, files hashed only up to kMaxHashedFileBytes each and kHashBudgetMs in all.
// Whatever could not be read is "unknown (why)", never an error: the supervisor does not refuse
// a host for what it could not check.
//
// The container image: $DTRAIN_IMAGE_DIGEST (the worker's environment as the spec sets it, else
// the agent's: a platform that knows the digest sets it) wins; else podman's /run/.containerenv
// `imageid`; else, in a container (/.dockerenv, /run/.containerenv, $KUBERNETES_SERVICE_HOST),
// "unknown (...)", since neither Docker nor Kubernetes tells a container its image digest; else
// "none".

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/proto/stack_fingerprint.h"

namespace dtrain::agent {

/// Larger files of the worker command are "unknown (larger than 64 MiB: not hashed)".
inline constexpr int64_t kMaxHashedFileBytes = int64_t{64} << 20;
/// Hashing stops after this long (the rest are unknown): the launch waits for hello.
inline constexpr int64_t kHashBudgetMs = 2'000;
/// The interpreter's output beyond this is garbage: it is killed, python/torch are unknown.
inline constexpr size_t kMaxPythonProbeOutputBytes = 64 << 10;

/// Gathers the fingerprint for `request`. Never throws; takes at most about the request's
/// timeout plus kHashBudgetMs.
proto::StackFingerprint probe_stack(const proto::StackProbeRequest& request);

/// `dtrain agent --stack-probe REQUEST`: parses the request (config.stack's JSON), prints the
/// fingerprint's JSON on one line to stdout, returns 0; 2 with a message on stderr for a request
/// that does not parse. What `dtrain hosts` runs on each host.
int run_stack_probe(const std::string& request_json);

// ---- the pure parts (unit-tested) ----

/// How a worker command runs: the Python interpreter that runs it (nullopt: not a Python
/// command) and the files to hash, each with the name hosts compare it by (as the command
/// writes it) and the path it resolves to (relative ones against the working directory).
struct CommandFiles {
  std::optional<std::string> python;
  struct File {
    std::string name;
    std::string path;  ///< "" when argv[0] was not found: reported "missing"
  };
  std::vector<File> files;
};

/// `resolve_program` finds argv[0] (and a shebang's `env NAME`) the way exec would: a path with
/// a slash as it is, else the first executable of that name on the worker's PATH ("" if none).
/// `first_line` reads a file's first line (a shebang), "" when it cannot. `is_file` says whether
/// a path names an existing regular file.
struct CommandFileSystem {
  std::string (*resolve_program)(const std::string& name, const std::string& search_path) = nullptr;
  std::string (*first_line)(const std::string& path) = nullptr;
  bool (*is_file)(const std::string& path) = nullptr;
};
CommandFiles command_files(const std::vector<std::string>& argv, const std::string& workdir,
                           const std::string& search_path, const CommandFileSystem& fs);

/// Whether a program's file name is a Python interpreter's: python, python3, python3.11.
bool is_python_name(const std::string& path);

/// PRETTY_NAME of /etc/os-release's text ("Debian GNU/Linux 12 (bookworm)"), "" when absent.
std::string os_release_name(const std::string& text);
/// "550.54.15" from /proc/driver/nvidia/version's text, "" when it names none.
std::string nvidia_driver_from_proc(const std::string& text);
/// cuda.version of a CUDA toolkit's version.json ("12.4.1"), "" when absent.
std::string cuda_version_from_json(const std::string& text);
/// "2.21.5" from "libnccl.so.2.21.5" (also libcudart.so.12.4.127 with `stem` "libcudart.so."),
/// "" when the name is not that library with a full version.
std::string library_version(const std::string& file_name, const std::string& stem);

/// Reads the Python probe's output ("DTRAIN_STACK key=value" lines) into `fingerprint`
/// (python, torch, python_nccl, python_cuda). False when it holds no python line.
bool apply_python_probe_output(const std::string& output, proto::StackFingerprint& fingerprint);

/// The image item (see the header comment) from what the probe found.
struct ImageFacts {
  std::optional<std::string> digest_variable;  ///< $DTRAIN_IMAGE_DIGEST
  std::optional<std::string> containerenv;     ///< /run/.containerenv's text, when it exists
  bool dockerenv = false;                      ///< /.dockerenv exists
  bool kubernetes = false;                     ///< $KUBERNETES_SERVICE_HOST is set
};
std::string image_of(const ImageFacts& facts);

/// The Python the probe runs with `-c` (exposed for tests).
const char* python_probe_script();

}  // namespace dtrain::agent
