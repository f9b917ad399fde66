#include "launcher/drill/partition.h"

#include <algorithm>
#include <cctype>

#include "launcher/base/strings.h"

namespace dtrain::drill {

Millis default_partition_duration(Millis heartbeat_timeout, Millis stop_grace) {
  return std::max(Millis(60'000), 2 * heartbeat_timeout + stop_grace + Millis(60'000));
}

std::string expand_host_command(const std::string& command, const std::string& host) {
  bool plain = !host.empty() && std::all_of(host.begin(), host.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == '_';
  });
  std::string value = plain ? host : shell_quote(host);
  std::string out;
  const std::string placeholder = "{host}";
  for (size_t at = 0;;) {
    size_t found = command.find(placeholder, at);
    if (found == std::string::npos) {
      out += command.substr(at);
      return out;
    }
    out += command.substr(at, found - at) + value;
    at = found + placeholder.size();
  }
}

namespace {

std::string seconds(Millis duration) {
  int64_t ms = duration.count();
  return std::to_string(ms / 1000) + "." + std::string(ms % 1000 < 100 ? (ms % 1000 < 10 ? "00" : "0") : "") +
         std::to_string(ms % 1000);
}

}  // namespace

std::string firewall_cut_script(const std::string& table, Millis start_delay, Millis duration) {
  // Everything after the checks runs in the detached helper: once the rules are in, this SSH
  // session is cut off too, and the host must heal itself without us.
  std::string t = table;
  return "addr=${SSH_CLIENT%% *}\n"
         "[ -n \"$addr\" ] || { echo 'no $SSH_CLIENT: run the firewall cut over SSH' >&2; exit 3; }\n"
         "[ \"$(id -u)\" = 0 ] || { echo \"firewall rules need root on $(hostname); the drill's SSH user is $(id -un)\" >&2; exit 5; }\n"
         "fam=ip; case $addr in *:*) fam=ip6;; esac\n"
         "ipt=iptables; case $addr in *:*) ipt=ip6tables;; esac\n"
         "if command -v nft >/dev/null 2>&1; then\n"
         "  tool=nft\n"
         "  cut=\"nft add table inet " + t + " && "
         "nft add chain inet " + t + " input '{ type filter hook input priority -300; policy accept; }' && "
         "nft add chain inet " + t + " output '{ type filter hook output priority -300; policy accept; }' && "
         "nft add rule inet " + t + " input $fam saddr $addr drop && "
         "nft add rule inet " + t + " output $fam daddr $addr drop\"\n"
         "  heal=\"nft delete table inet " + t + "\"\n"
         "elif command -v $ipt >/dev/null 2>&1; then\n"
         "  tool=$ipt\n"
         "  cut=\"$ipt -I INPUT -s $addr -j DROP && $ipt -I OUTPUT -d $addr -j DROP\"\n"
         "  heal=\"$ipt -D INPUT -s $addr -j DROP; $ipt -D OUTPUT -d $addr -j DROP\"\n"
         "else\n"
         "  echo \"neither nft nor $ipt on $(hostname); install nftables, or cut with --cut-command\" >&2; exit 4\n"
         "fi\n"
         "nohup setsid /bin/sh -c \"sleep " + seconds(start_delay) + "; $cut; sleep " + seconds(duration) +
         "; $heal\" </dev/null >/dev/null 2>&1 &\n"
         "echo \"cut $addr via $tool\"\n";
}

}  // namespace dtrain::drill
