#pragma once
// partition-host's two ways to cut a host off, as text: the user's cut/heal commands with
// {host} filled in, and the self-healing firewall script the drill starts on the host.
// Pure, so unit tests can read exactly what would run.

#include <optional>
#include <string>

#include "launcher/base/duration.h"

namespace dtrain::drill {

/// How long a host stays cut off when the drill is not told: heartbeat.timeout (detection) +
/// stop_grace (the cut-off agent fencing its workers) + one more heartbeat.timeout and 60 s
/// for the recovery to be planned, spawned and training; at least 60 s. The drill heals sooner
/// (commands) once the run has recovered; firewall rules always stay this long.
Millis default_partition_duration(Millis heartbeat_timeout, Millis stop_grace);

/// `command` with every "{host}" replaced by `host` (shell-quoted when it holds anything but
/// letters, digits, '.', '-', '_', so a host name cannot inject shell syntax).
std::string expand_host_command(const std::string& command, const std::string& host);

/// The script the drill runs on a host over SSH (firewall method). It checks what it can while
/// the drill still hears it, then starts a detached helper and returns at once; the helper
/// waits `start_delay` (so that the SSH session that started it ends cleanly), adds rules that
/// drop every packet to and from the address the drill connected from ($SSH_CLIENT: the launch
/// node), sleeps `duration`, and deletes exactly those rules. With nft: one transaction (`nft -f
/// -`) creating table `inet <table>` with input and output chains at priority -300 and a drop
/// rule each, first validated by the kernel without being applied (`nft -c`); healed with `nft
/// delete table inet <table>`. Without nft: iptables (ip6tables for IPv6) INPUT/OUTPUT DROP
/// rules, inserted and deleted again. Once the rules are in, the helper writes the host's clock
/// (Unix ms) to ${TMPDIR:-/tmp}/<table>.cut for firewall_check_script(). Exit status: 0 started;
/// 3 no $SSH_CLIENT; 4 neither nft nor iptables; 5 not root; 6 the tool refused the rules (its
/// message on stderr). Prints "cut <address> via <tool>".
std::string firewall_cut_script(const std::string& table, Millis start_delay, Millis duration);

/// The script the drill runs over SSH once the rules should have expired (so reaching the host
/// at all proves it is no longer cut off from the launch node): exit 0 when no rule of the cut
/// is left (no table `inet <table>`; no iptables DROP rule for $SSH_CLIENT), printing
/// "cut_at=<Unix ms>" when the helper stamped the cut, and removing the stamp; else exit 1 and
/// prints what is left.
std::string firewall_check_script(const std::string& table);

/// The "cut_at=<Unix ms>" value in the check script's output, if any.
std::optional<int64_t> parse_cut_at(const std::string& output);

}  // namespace dtrain::drill
