#include "launcher/drill/partition.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "launcher/base/duration.h"
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

std::string firewall_cut_script(const std::string& table, Millis start_delay, Millis duration) {
  // Everything after the checks runs in the detached helper: once the rules are in, this SSH
  // session is cut off too, and the host must heal itself without us. So every failure that
  // can be found beforehand is found here, where the drill still hears about it.
  const std::string& t = table;
  return "addr=${SSH_CLIENT%% *}\n"
         "[ -n \"$addr\" ] || { echo 'no $SSH_CLIENT: run the firewall cut over SSH' >&2; exit 3; }\n"
         "[ \"$(id -u)\" = 0 ] || { echo \"firewall rules need root on $(hostname); the drill's SSH user is $(id -un)\" >&2; exit 5; }\n"
         "fam=ip; case $addr in *:*) fam=ip6;; esac\n"
         "ipt=iptables; case $addr in *:*) ipt=ip6tables;; esac\n"
         "if command -v nft >/dev/null 2>&1; then\n"
         "  tool=nft\n"
         "  rules=\"table inet " + t + " {\n"
         "  chain input { type filter hook input priority -300; policy accept; $fam saddr $addr drop; }\n"
         "  chain output { type filter hook output priority -300; policy accept; $fam daddr $addr drop; }\n"
         "}\"\n"
         // -c: the kernel checks the whole transaction (modules, permissions) without applying it.
         "  err=$(printf '%s\\n' \"$rules\" | nft -c -f - 2>&1) || { echo \"nft on $(hostname) refused the rules: $err\" >&2; exit 6; }\n"
         "  export rules\n"
         "  cut='printf \"%s\\n\" \"$rules\" | nft -f -'\n"
         "  heal=\"nft delete table inet " + t + "\"\n"
         "elif command -v $ipt >/dev/null 2>&1; then\n"
         "  tool=$ipt\n"
         "  err=$($ipt -w -S INPUT 2>&1 >/dev/null) || { echo \"$ipt on $(hostname) does not work: $err\" >&2; exit 6; }\n"
         "  cut=\"$ipt -w -I INPUT -s $addr -j DROP && $ipt -w -I OUTPUT -d $addr -j DROP\"\n"
         "  heal=\"$ipt -w -D INPUT -s $addr -j DROP; $ipt -w -D OUTPUT -d $addr -j DROP\"\n"
         "else\n"
         "  echo \"neither nft nor $ipt on $(hostname); install nftables, or cut with --cut-command\" >&2; exit 4\n"
         "fi\n"
         // The moment the rules are in, on the host's clock: the check script hands it back.
         "stamp=\"${TMPDIR:-/tmp}/" + t + ".cut\"\n"
         "rm -f \"$stamp\"\n"
         "nohup setsid /bin/sh -c \"sleep " + format_duration(start_delay, DurationStyle::decimal_seconds) + "; $cut && date +%s%3N > '$stamp'; sleep " +
         format_duration(duration, DurationStyle::decimal_seconds) + "; $heal\" </dev/null >/dev/null 2>&1 &\n"
         "echo \"cut $addr via $tool\"\n";
}

std::string firewall_check_script(const std::string& table) {
  const std::string& t = table;
  return "addr=${SSH_CLIENT%% *}\n"
         "left=\n"
         "if command -v nft >/dev/null 2>&1 && nft list table inet " + t + " >/dev/null 2>&1; then\n"
         "  left=\"nft table inet " + t + "\"\n"
         "fi\n"
         "ipt=iptables; case $addr in *:*) ipt=ip6tables;; esac\n"
         "if [ -n \"$addr\" ] && command -v $ipt >/dev/null 2>&1; then\n"
         "  $ipt -w -C INPUT -s $addr -j DROP 2>/dev/null && left=\"$left${left:+, }$ipt INPUT -s $addr -j DROP\"\n"
         "  $ipt -w -C OUTPUT -d $addr -j DROP 2>/dev/null && left=\"$left${left:+, }$ipt OUTPUT -d $addr -j DROP\"\n"
         "fi\n"
         "[ -z \"$left\" ] || { echo \"still on $(hostname): $left\"; exit 1; }\n"
         "stamp=\"${TMPDIR:-/tmp}/" + t + ".cut\"\n"
         "[ -f \"$stamp\" ] && echo \"cut_at=$(cat \"$stamp\")\"\n"
         "rm -f \"$stamp\"\n"
         "exit 0\n";
}

std::optional<int64_t> parse_cut_at(const std::string& output) {
  const std::string key = "cut_at=";
  size_t at = output.find(key);
  if (at == std::string::npos) return std::nullopt;
  const char* begin = output.data() + at + key.size();
  const char* end = output.data() + output.size();
  int64_t value = 0;
  auto [stop, error] = std::from_chars(begin, end, value);
  if (error != std::errc() || stop == begin || (stop != end && *stop != '\n') || value <= 0) return std::nullopt;
  return value;
}

}  // namespace dtrain::drill
