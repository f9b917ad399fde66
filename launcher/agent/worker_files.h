#pragma once
// The files an agent keeps for its workers, in its own runtime directory (next to its worker
// socket, so under the same 0700, checked directory): the Python bootstrap it puts first on
// PYTHONPATH (worker/python/bootstrap/sitecustomize.py and worker/python/*.py, embedded in the
// binary at build time), one TORCHELASTIC_ERROR_FILE per (generation, rank), read when
// the worker fails, and the PyTorch flight recorder's dumps and debug-info pipes. Internal to the agent module.

#include <cstddef>
#include <optional>
#include <string>

#include "launcher/proto/agent_messages.h"

#include "launcher/base/result.h"

namespace dtrain::agent {

class WorkerFiles {
 public:
  /// Makes `directory` (mode 0700; its parent must exist and be ours) and writes the bootstrap
  /// into `directory/python`. Errors name the path.
  static Result<WorkerFiles> create(std::string directory);
  /// Removes what create() and the workers' error files put there.
  ~WorkerFiles();
  WorkerFiles(WorkerFiles&& other) noexcept : directory_(std::move(other.directory_)) { other.directory_.clear(); }
  WorkerFiles& operator=(WorkerFiles&&) = delete;
  WorkerFiles(const WorkerFiles&) = delete;

  /// The directory to put first on PYTHONPATH.
  std::string python_path() const { return directory_ + "/python"; }

  /// `<directory>/error-g<gen>-r<rank>.json`, the rank's TORCHELASTIC_ERROR_FILE.
  std::string error_file(int gen, int rank) const;

  /// `<directory>/flight-recorder-g<gen>-rank`: PyTorch appends the rank for a worker's
  /// flight-recorder dump, and the rank plus ".pipe" for its debug-info pipe (flight_recorder.h).
  std::string flight_recorder_prefix(int gen) const;

  const std::string& directory() const { return directory_; }

 private:
  explicit WorkerFiles(std::string directory) : directory_(std::move(directory)) {}
  std::string directory_;
};

/// PYTHONPATH for a worker: `bootstrap`, then the PYTHONPATH it would otherwise get
/// (`inherited`, when non-empty). An empty entry would mean the working directory, so none is
/// added.
std::string prepend_python_path(const std::string& bootstrap, const std::string& inherited);

/// Reads and removes a worker's error file (torch's errors/error_handler.py format:
/// {"message": {"message": "Type: text", "extraInfo": {"py_callstack", "timestamp"}}}, or
/// {"message": "text"}) and returns exit.error {type?, message, traceback?, timestamp?}, or
/// nullopt when there is none or it is not one: the worker wrote it, so a missing, non-regular,
/// oversized (> max_bytes) or malformed file is no error record, and nothing here throws.
std::optional<proto::WorkerErrorRecord> take_error_record(const std::string& path, size_t max_bytes);

}  // namespace dtrain::agent
