#include "launcher/base/result.h"

namespace dtrain {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::user: return "user";
    case ErrorKind::infra: return "infra";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

}  // namespace dtrain
