#pragma once
// The faults a drill can inject, as users name them: "kill-rank:1", "hang-rank:0",
// "corrupt-checkpoint", "slow-storage", "kill-host:gpu02", "partition-host:gpu02",
// "kill-supervisor".

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"

namespace dtrain::drill {

enum class FaultKind {
  kill_rank,           ///< SIGKILL one worker
  hang_rank,           ///< SIGSTOP one worker: alive, silent
  corrupt_checkpoint,  ///< damage the newest checkpoint, then SIGKILL a worker to force a restart
  slow_storage,        ///< delay every checkpoint write (DTRAIN_FAULT_CKPT_DELAY_MS); --spec only
  kill_host,           ///< every process of the run on one host, agent included
  partition_host,      ///< cut one host off the network
  kill_supervisor,     ///< SIGKILL dtrain itself; `dtrain resume` must finish the run
};

/// "kill-rank", ...
const char* to_string(FaultKind kind);

/// Every kind's name, in the order of the enum (for messages).
std::vector<std::string> fault_kind_names();

/// Whether this dtrain can inject `kind` (every kind today; kept so that a kind can be listed
/// before it is built).
bool is_implemented(FaultKind kind);

/// How partition-host cuts a host off. Neither is a default: the user picks one.
enum class PartitionMethod {
  none,      ///< not chosen yet: a partition-host fault is refused (usage) until one is
  commands,  ///< the user's cut/heal shell commands, run on the drill's machine
  firewall,  ///< nft (or iptables) rules on the host itself, opt-in (--allow-firewall)
};

/// One fault to inject.
struct Fault {
  FaultKind kind = FaultKind::kill_rank;
  /// The rank for kill-rank / hang-rank / corrupt-checkpoint (the worker killed to force the
  /// restart; default 0), the host for kill-host / partition-host.
  std::string target;
  std::optional<int> rank;            ///< `target` as a rank, where the kind takes one
  std::optional<int64_t> at_step;     ///< inject once every rank has reached this step
  Millis delay{1000};                 ///< slow-storage: the delay of each checkpoint write
  PartitionMethod partition = PartitionMethod::none;  ///< partition-host only
  std::string cut_command;            ///< partition-host commands: /bin/sh -c, "{host}" replaced
  std::string heal_command;
  /// partition-host: how long the host stays cut off at most (firewall: the rules delete
  /// themselves then); absent: default_partition_duration() of the run's spec.
  std::optional<Millis> partition_duration;

  /// "kill-rank:1", "corrupt-checkpoint:0", "slow-storage".
  std::string label() const;
};

/// Parses "KIND[:TARGET]". Errors (user) quote the text and list the kinds, with "did you
/// mean" for a near miss; a rank fault with a non-numeric target says so.
Result<Fault> parse_fault(std::string_view text);

/// A partition-host fault must say how to cut (cut and heal commands, or the firewall opt-in),
/// and only partition-host takes those settings. Errors (user) say how to fix it; `where`
/// prefixes them ("--fault partition-host:gpu02", "drill.yaml:7:5").
Status check_partition_settings(const Fault& fault, const std::string& where);

}  // namespace dtrain::drill
