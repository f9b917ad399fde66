#include "launcher/drill/fault.h"

#include <charconv>

#include "launcher/base/strings.h"

namespace dtrain::drill {

namespace {

constexpr FaultKind kKinds[] = {FaultKind::kill_rank,     FaultKind::hang_rank,      FaultKind::corrupt_checkpoint,
                                FaultKind::slow_storage,  FaultKind::kill_host,      FaultKind::partition_host,
                                FaultKind::kill_supervisor};

bool takes_rank(FaultKind kind) {
  return kind == FaultKind::kill_rank || kind == FaultKind::hang_rank || kind == FaultKind::corrupt_checkpoint;
}

}  // namespace

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::kill_rank: return "kill-rank";
    case FaultKind::hang_rank: return "hang-rank";
    case FaultKind::corrupt_checkpoint: return "corrupt-checkpoint";
    case FaultKind::slow_storage: return "slow-storage";
    case FaultKind::kill_host: return "kill-host";
    case FaultKind::partition_host: return "partition-host";
    case FaultKind::kill_supervisor: return "kill-supervisor";
  }
  return "unknown";
}

std::vector<std::string> fault_kind_names() {
  std::vector<std::string> names;
  for (FaultKind kind : kKinds) names.emplace_back(to_string(kind));
  return names;
}

bool is_implemented(FaultKind kind) {
  return kind == FaultKind::kill_rank || kind == FaultKind::hang_rank || kind == FaultKind::corrupt_checkpoint ||
         kind == FaultKind::slow_storage;
}

std::string Fault::label() const {
  return target.empty() ? std::string(to_string(kind)) : std::string(to_string(kind)) + ":" + target;
}

Result<Fault> parse_fault(std::string_view text) {
  std::string_view name = text;
  std::string target;
  if (size_t colon = text.find(':'); colon != std::string_view::npos) {
    name = text.substr(0, colon);
    target = std::string(text.substr(colon + 1));
  }
  Fault fault;
  bool found = false;
  for (FaultKind kind : kKinds) {
    if (name == to_string(kind)) {
      fault.kind = kind;
      found = true;
    }
  }
  if (!found) {
    std::string hint = closest_match(name, fault_kind_names());
    return Error::user("--fault '" + std::string(text) + "': unknown fault kind '" + std::string(name) + "'" +
                       (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (kinds: " +
                       join(fault_kind_names(), ", ") + ")");
  }
  if (takes_rank(fault.kind)) {
    if (target.empty() && fault.kind != FaultKind::corrupt_checkpoint) {
      return Error::user("--fault '" + std::string(text) + "': name the rank, e.g. " + to_string(fault.kind) + ":1");
    }
    if (!target.empty()) {
      int rank = -1;
      auto [end, error] = std::from_chars(target.data(), target.data() + target.size(), rank);
      if (error != std::errc() || end != target.data() + target.size() || rank < 0) {
        return Error::user("--fault '" + std::string(text) + "': '" + target + "' is not a rank; write " +
                           to_string(fault.kind) + ":<rank>, e.g. " + to_string(fault.kind) + ":1");
      }
      fault.rank = rank;
    } else {
      fault.rank = 0;  // corrupt-checkpoint: rank 0 is killed to force the restart
    }
  } else if ((fault.kind == FaultKind::kill_host || fault.kind == FaultKind::partition_host) && target.empty()) {
    return Error::user("--fault '" + std::string(text) + "': name the host, e.g. " + to_string(fault.kind) + ":gpu02");
  } else if ((fault.kind == FaultKind::slow_storage || fault.kind == FaultKind::kill_supervisor) && !target.empty()) {
    return Error::user("--fault '" + std::string(text) + "': " + to_string(fault.kind) + " takes no target; write " +
                       to_string(fault.kind));
  }
  fault.target = target;
  return fault;
}

}  // namespace dtrain::drill
