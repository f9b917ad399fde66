#pragma once
// Invariants shared by the host targets (hostlist, hostfile, host_filters): what a HostEntry
// that a parser accepted may hold, and how to write it back as hostfile text.

#include <algorithm>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::fuzz {

inline bool is_host_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

/// A name the hostlist grammar can produce: letters, digits, '-', '.', '_'.
inline bool is_plain_host_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), is_host_name_char);
}

/// An IPv6 literal: hex digits, ':' and '.' (an embedded IPv4), at least two ':', and an optional
/// "%zone" of name characters.
inline bool is_ipv6_literal(const std::string& name) {
  size_t percent = name.find('%');
  std::string address = name.substr(0, percent);
  if (std::count(address.begin(), address.end(), ':') < 2) return false;
  for (char c : address) {
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex && c != ':' && c != '.') return false;
  }
  if (percent == std::string::npos) return true;
  return is_plain_host_name(name.substr(percent + 1));
}

/// Every accepted host has a name a resolver can be given, a user without separators, a port
/// in range and a non-negative slot count.
inline void check_host_entry(const spec::HostEntry& host) {
  check(is_plain_host_name(host.name) || is_ipv6_literal(host.name),
        "an accepted host name is a hostname or an IPv6 literal", "name='" + host.name + "'");
  check(host.user.empty() || is_plain_host_name(host.user), "an accepted user is a plain name",
        "user='" + host.user + "'");
  check(host.port >= 0 && host.port <= 65535, "port is 0 (default) or 1..65535",
        "port=" + std::to_string(host.port));
  check(host.slots >= 0, "slots is not negative", "slots=" + std::to_string(host.slots));
  check(host.port == 0 || !is_ipv6_literal(host.name), "an IPv6 literal takes no port", host.name);
}

/// The hostfile line that reads back as `host`: "user@name:port slots=N".
inline std::string to_hostfile_line(const spec::HostEntry& host) {
  std::string line;
  if (!host.user.empty()) line += host.user + "@";
  line += host.name;
  if (host.port != 0) line += ":" + std::to_string(host.port);
  if (host.slots != 0) line += " slots=" + std::to_string(host.slots);
  return line;
}

inline std::string describe(const std::vector<spec::HostEntry>& hosts) {
  std::string text;
  for (const spec::HostEntry& host : hosts) text += "[" + to_hostfile_line(host) + "] ";
  return text;
}

}  // namespace dtrain::fuzz
