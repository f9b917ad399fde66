#include "launcher/spec/job_spec.h"

#include <unistd.h>

#include <climits>

#include "launcher/base/secrets.h"

namespace dtrain::spec {

bool HostEntry::is_local() const {
  if (name == "localhost" || name == "127.0.0.1" || name == "::1") return true;
  char buffer[HOST_NAME_MAX + 1] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0) return false;
  return name == buffer;
}

std::vector<std::string> WorkerSettings::secret_values() const {
  std::vector<std::string> values;
  for (const auto& [name, value] : env) {
    if (looks_secret(name) || std::binary_search(pass_env.begin(), pass_env.end(), name)) values.push_back(value);
  }
  return values;
}

const char* to_string(TransportKind transport) {
  switch (transport) {
    case TransportKind::auto_select: return "auto";
    case TransportKind::ssh: return "ssh";
    case TransportKind::srun: return "srun";
  }
  return "auto";
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::auto_select: return "auto";
    case Backend::gloo: return "gloo";
    case Backend::nccl: return "nccl";
  }
  return "auto";
}

}  // namespace dtrain::spec
