#include "launcher/transport/agent_binary.h"

#include <sys/utsname.h>

#include <cstdio>

#include "launcher/base/fd.h"
#include "launcher/transport/ssh_digest.h"

namespace dtrain::transport {

Status AgentBinary::load() {
  if (loaded_) return status_;
  loaded_ = true;
  std::string path = path_.empty() ? "/proc/self/exe" : path_;
  auto read = read_file(path);
  if (!read) {
    status_ = Error::infra("cannot read the dtrain binary to copy (" + path + "): " + read.error().message);
    return status_;
  }
  contents_ = std::make_shared<const std::string>(std::move(*read));
  sha256_ = sha256_hex(*contents_);
  if (sha256_.empty()) {
    status_ = Error::infra("cannot hash the dtrain binary to copy (" + path + "): OpenSSL's SHA-256 failed");
  }
  return status_;
}

std::string local_os() {
  utsname names{};
  if (::uname(&names) != 0) return "unknown";
  return std::string(names.sysname) + " " + names.machine;
}

std::string megabytes(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace dtrain::transport
