#pragma once
// FileKv: a KvClient over a directory, so that benchmark ranks forked as separate processes
// can rendezvous (Gloo's store) without a running dtrain. One file per key, written to a
// temporary name and renamed, so a reader sees a whole value or none.

#include <string>

#include "worker/runtime/worker.h"

namespace dtrain::bench {

/// A KvClient whose keys are files in `dir` (which must exist and be private to one run).
/// wait() polls every millisecond; generation_is_current() is always true (no supervisor).
class FileKv final : public worker::KvClient {
 public:
  explicit FileKv(std::string dir) : dir_(std::move(dir)) {}
  worker::Status set(const std::string& key, const std::string& value) override;
  worker::Result<std::optional<std::string>> get(const std::string& key) override;
  worker::Result<std::vector<std::string>> wait(const std::vector<std::string>& keys,
                                                worker::Millis timeout) override;
  worker::Result<bool> generation_is_current() override { return true; }

 private:
  /// Keys hold '/' and other characters a file name cannot: every byte outside [A-Za-z0-9-]
  /// becomes _XX.
  std::string path_of(const std::string& key) const;

  std::string dir_;
};

}  // namespace dtrain::bench
