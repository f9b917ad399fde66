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

bool is_implemented(FaultKind) { return true; }

Status check_partition_settings(const Fault& fault, const std::string& where) {
  bool has_commands = !fault.cut_command.empty() || !fault.heal_command.empty();
  if (fault.kind != FaultKind::partition_host) {
    if (has_commands || fault.partition != PartitionMethod::none || fault.partition_duration) {
      return Error::user(where + ": only partition-host takes cut/heal commands, a firewall opt-in or a partition "
                                 "duration; remove them from " + fault.label());
    }
    return {};
  }
  if (fault.partition == PartitionMethod::firewall && has_commands) {
    return Error::user(where + ": choose one way to cut " + fault.target +
                       ": the firewall rules or the cut/heal commands, not both");
  }
  if (fault.partition == PartitionMethod::firewall) return {};
  if (!has_commands) {
    return Error::user(where + ": partition-host needs a way to cut " + fault.target +
                       " off, and the drill picks none by itself: give --cut-command CMD --heal-command CMD "
                       "(drill.yaml: partition: {cut: ..., heal: ...}; {host} is replaced by the host name), or "
                       "opt in to nft/iptables rules on the host with --allow-firewall (drill.yaml: partition: "
                       "{method: firewall}; see dtrain-drill(1))");
  }
  if (fault.cut_command.empty() || fault.heal_command.empty()) {
    return Error::user(where + ": give both a cut and a heal command (" +
                       (fault.cut_command.empty() ? "the cut" : "the heal") +
                       " command is missing): a drill never leaves a host cut off");
  }
  return {};
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
