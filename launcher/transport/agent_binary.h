#pragma once
// The dtrain binary that provisioning copies to a host that lacks it (both SSH clients): read
// once per transport, hashed once (the host runs a copy only when its sha256 matches).

#include <memory>
#include <string>

#include "launcher/base/result.h"

namespace dtrain::transport {

class AgentBinary {
 public:
  /// `path` empty: this very executable (/proc/self/exe).
  explicit AgentBinary(std::string path) : path_(std::move(path)) {}

  /// Reads and hashes the binary on the first call; later calls return the first outcome.
  Status load();
  /// After a successful load().
  const std::shared_ptr<const std::string>& contents() const { return contents_; }
  const std::string& sha256() const { return sha256_; }

 private:
  std::string path_;
  bool loaded_ = false;
  Status status_;
  std::shared_ptr<const std::string> contents_;
  std::string sha256_;
};

/// "Linux x86_64": what `uname -s` and `uname -m` say here; a copy runs only on the same.
std::string local_os();

/// "12.3 MB".
std::string megabytes(size_t bytes);

}  // namespace dtrain::transport
