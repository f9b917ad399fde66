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
    case TransportKind::kubectl: return "kubectl";
  }
  return "auto";
}

const char* to_string(Consistency consistency) {
  switch (consistency) {
    case Consistency::strict: return "strict";
    case Consistency::warn: return "warn";
    case Consistency::off: return "off";
  }
  return "strict";
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::auto_select: return "auto";
    case Backend::gloo: return "gloo";
    case Backend::nccl: return "nccl";
  }
  return "auto";
}

const char* to_string(IntentSettings::Precision precision) {
  switch (precision) {
    case IntentSettings::Precision::fp32: return "fp32";
    case IntentSettings::Precision::tf32: return "tf32";
    case IntentSettings::Precision::bf16: return "bf16";
    case IntentSettings::Precision::fp16: return "fp16";
    case IntentSettings::Precision::fp8: return "fp8";
  }
  return "bf16";
}

const char* to_string(IntentSettings::Optimizer optimizer) {
  switch (optimizer) {
    case IntentSettings::Optimizer::adam: return "adam";
    case IntentSettings::Optimizer::adamw: return "adamw";
    case IntentSettings::Optimizer::sgd: return "sgd";
    case IntentSettings::Optimizer::sgd_momentum: return "sgd-momentum";
    case IntentSettings::Optimizer::adafactor: return "adafactor";
    case IntentSettings::Optimizer::none: return "none";
  }
  return "adamw";
}

const char* to_string(IntentSettings::RecoveryMode mode) {
  return mode == IntentSettings::RecoveryMode::in_place ? "in-place" : "restart";
}

int bytes_per_weight(IntentSettings::Precision precision) {
  switch (precision) {
    case IntentSettings::Precision::fp32:
    case IntentSettings::Precision::tf32: return 4;
    case IntentSettings::Precision::bf16:
    case IntentSettings::Precision::fp16: return 2;
    case IntentSettings::Precision::fp8: return 1;
  }
  return 2;
}

}  // namespace dtrain::spec
