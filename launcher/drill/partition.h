#pragma once
// partition-host's two ways to cut a host off, as text: the user's cut/heal commands with
// {host} filled in, and the self-healing firewall script the drill starts on the host.
// Pure, so unit tests can read exactly what would run.

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

/// The script the drill runs on a host over SSH (firewall method). It starts a detached
/// helper and returns at once; the helper waits `start_delay` (so that the SSH session that
/// started it ends cleanly), adds rules that drop every packet to and from the address the
/// drill connected from ($SSH_CLIENT: the launch node) — nft table `inet <table>` with input and
/// output chains, or, without nft, iptables INPUT/OUTPUT DROP rules — sleeps `duration`, and
/// deletes exactly those rules. Exit status: 0 started; 3 no $SSH_CLIENT; 4 neither nft nor
/// iptables; 5 not root. Prints "cut <address> via <tool>".
std::string firewall_cut_script(const std::string& table, Millis start_delay, Millis duration);

}  // namespace dtrain::drill
