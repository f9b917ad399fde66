// Slurm/pdsh hostlists, DeepSpeed/Open MPI hostfiles, include/exclude filters and env files.

#include "launcher/spec/hostlist.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "launcher/base/strings.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::spec {
namespace {

// A hostlist that expands past this is almost certainly a typo ("[1-1000000]"), and expanding
// it would eat memory before any error could be shown.
constexpr size_t kMaxExpandedHosts = 65536;

std::string single_quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

bool parse_non_negative(std::string_view text, long long& value) {
  if (text.empty() || text.size() > 9) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && value >= 0;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// Splits at `separator` where it is not inside [...]; fails on unbalanced brackets.
Result<std::vector<std::string>> split_outside_brackets(std::string_view text, char separator) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') {
      if (++depth > 1) return Error::user(single_quoted(text) + " has nested '['; a range is written gpu[01-04,07]");
    } else if (text[i] == ']') {
      if (--depth < 0) return Error::user(single_quoted(text) + " has a ']' without '['");
    } else if (text[i] == separator && depth == 0) {
      parts.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return Error::user(single_quoted(text) + " has a '[' without ']'");
  parts.emplace_back(text.substr(start));
  return parts;
}

// "01-04,07" → {"01","02","03","04","07"}; the lower bound's width is kept (zero padding).
Result<std::vector<std::string>> expand_ranges(std::string_view ranges, std::string_view whole) {
  std::vector<std::string> out;
  const std::string fix = "; write ranges as gpu[01-04,07]";
  for (const std::string& item : split(ranges, ',')) {
    size_t dash = item.find('-');
    std::string low = item.substr(0, dash);
    std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    long long low_value = 0, high_value = 0;
    if (!parse_non_negative(low, low_value) || !parse_non_negative(high, high_value)) {
      return Error::user(single_quoted(whole) + ": " + single_quoted(item) + " is not a number or range" + fix);
    }
    if (low_value > high_value) {
      return Error::user(single_quoted(whole) + ": range " + single_quoted(item) + " runs backwards; write " +
                         high + "-" + low);
    }
    if (out.size() + static_cast<size_t>(high_value - low_value) >= kMaxExpandedHosts) {
      return Error::user(single_quoted(whole) + " expands to more than " + std::to_string(kMaxExpandedHosts) + " hosts");
    }
    for (long long value = low_value; value <= high_value; ++value) {
      std::string digits = std::to_string(value);
      if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return out;
}

// One comma-free term such as "rack[1-2]-gpu[01-02]" → the cartesian product, left to right.
Result<std::vector<std::string>> expand_term(std::string_view term, std::string_view whole) {
  if (term.empty()) return Error::user(single_quoted(whole) + " has an empty host name");
  std::vector<std::string> names{""};
  size_t i = 0;
  while (i < term.size()) {
    std::vector<std::string> pieces;
    if (term[i] == '[') {
      size_t close = term.find(']', i);
      auto expanded = expand_ranges(term.substr(i + 1, close - i - 1), whole);
      if (!expanded) return expanded.error();
      pieces = std::move(*expanded);
      i = close + 1;
    } else {
      size_t end = term.find('[', i);
      if (end == std::string_view::npos) end = term.size();
      std::string_view literal = term.substr(i, end - i);
      for (char c : literal) {
        if (!is_name_char(c)) {
          return Error::user(single_quoted(whole) + " contains " + single_quoted(std::string(1, c)) +
                             "; a host name has letters, digits, '-', '.' and '_'");
        }
      }
      pieces.emplace_back(literal);
      i = end;
    }
    if (names.size() * pieces.size() > kMaxExpandedHosts) {
      return Error::user(single_quoted(whole) + " expands to more than " + std::to_string(kMaxExpandedHosts) + " hosts");
    }
    std::vector<std::string> next;
    next.reserve(names.size() * pieces.size());
    for (const std::string& prefix : names) {
      for (const std::string& piece : pieces) next.push_back(prefix + piece);
    }
    names = std::move(next);
  }
  return names;
}

// Hex digits, ':' and '.' (an embedded IPv4 address), then an optional "%zone" (an interface
// name). Not a full address check: the resolver has the last word, this only keeps out text
// that cannot be one.
bool is_ipv6_literal(std::string_view text) {
  size_t percent = text.find('%');
  std::string_view address = text.substr(0, percent);
  for (char c : address) {
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex && c != ':' && c != '.') return false;
  }
  if (percent == std::string_view::npos) return true;
  std::string_view zone = text.substr(percent + 1);
  return !zone.empty() && std::all_of(zone.begin(), zone.end(), is_name_char);
}

Result<int> parse_port(std::string_view text, std::string_view whole) {
  long long port = 0;
  if (!parse_non_negative(text, port) || port < 1 || port > 65535) {
    return Error::user(single_quoted(whole) + ": port " + single_quoted(text) + " is not a number from 1 to 65535");
  }
  return static_cast<int>(port);
}

// "user@name:port" without top-level commas.
Result<std::vector<HostEntry>> parse_host_term(std::string_view term, std::string_view whole) {
  HostEntry base;
  std::string_view rest = term;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    base.user = std::string(rest.substr(0, at));
    if (base.user.empty()) return Error::user(single_quoted(whole) + " has '@' but no user before it");
    for (char c : base.user) {
      if (!is_name_char(c)) return Error::user(single_quoted(whole) + ": user " + single_quoted(base.user) + " contains " + single_quoted(std::string(1, c)));
    }
    rest = rest.substr(at + 1);
  }
  // Two or more colons: an IPv6 literal ("::1"), which takes no port and no ranges. Checked, so
  // that a typo such as "gpu01:22:x" is not taken for an address and handed to the resolver.
  if (std::count(rest.begin(), rest.end(), ':') > 1) {
    if (!is_ipv6_literal(rest)) {
      return Error::user(single_quoted(whole) + ": " + single_quoted(rest) +
                         " is neither a host name nor an IPv6 address; write gpu01, gpu01:2222 or fe80::1%eth0");
    }
    base.name = std::string(rest);
    return std::vector<HostEntry>{base};
  }
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    auto port = parse_port(rest.substr(colon + 1), whole);
    if (!port) return port.error();
    base.port = *port;
    rest = rest.substr(0, colon);
  }
  auto names = expand_term(rest, whole);
  if (!names) return names.error();
  std::vector<HostEntry> hosts;
  for (std::string& name : *names) {
    HostEntry entry = base;
    entry.name = std::move(name);
    hosts.push_back(std::move(entry));
  }
  return hosts;
}

// The words of a line with their 1-based columns.
std::vector<std::pair<std::string, int>> words(std::string_view line) {
  std::vector<std::pair<std::string, int>> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.emplace_back(std::string(line.substr(start, i - start)), static_cast<int>(start) + 1);
  }
  return out;
}

// Parses one hostfile line (already without its comment). Returns false with a problem.
bool parse_host_line(std::string_view line, std::vector<HostEntry>& hosts, LineProblem& problem) {
  auto tokens = words(line);
  if (tokens.empty()) return true;
  auto entries = parse_host_expression(tokens[0].first);
  if (!entries) {
    problem = {0, tokens[0].second, entries.error().message};
    return false;
  }
  int slots = 0;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const auto& [word, column] = tokens[i];
    size_t equals = word.find('=');
    std::string key = word.substr(0, equals);
    std::string value = equals == std::string::npos ? "" : word.substr(equals + 1);
    long long number = 0;
    if (key != "slots" && key != "max_slots") {
      problem = {0, column, "unknown attribute " + single_quoted(word) + "; write 'host slots=N'"};
      return false;
    }
    if (!parse_non_negative(value, number) || number < 1) {
      problem = {0, column, single_quoted(word) + ": " + key + " must be a whole number of 1 or more, as in slots=4"};
      return false;
    }
    if (key == "slots") slots = static_cast<int>(number);  // max_slots: Open MPI's, no meaning here
  }
  for (HostEntry& entry : *entries) {
    entry.slots = slots;
    hosts.push_back(std::move(entry));
  }
  return true;
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view expression) {
  std::string_view text = trim(expression);
  if (text.empty()) return Error::user("empty hostlist; write gpu[01-04,07] or a,b");
  auto terms = split_outside_brackets(text, ',');
  if (!terms) return terms.error();
  std::vector<std::string> names;
  for (const std::string& term : *terms) {
    auto expanded = expand_term(term, text);
    if (!expanded) return expanded.error();
    names.insert(names.end(), expanded->begin(), expanded->end());
    if (names.size() > kMaxExpandedHosts) {
      return Error::user(single_quoted(text) + " expands to more than " + std::to_string(kMaxExpandedHosts) + " hosts");
    }
  }
  return names;
}

Result<std::vector<HostEntry>> parse_host_expression(std::string_view text) {
  text = trim(text);
  if (text.empty()) return Error::user("empty host; write gpu01, user@gpu[01-04]:2222 or 'gpu01 slots=4'");
  if (text.find_first_of(" \t") != std::string_view::npos) {
    std::vector<HostEntry> hosts;
    LineProblem problem;
    if (!parse_host_line(text, hosts, problem)) return Error::user(problem.message);
    return hosts;
  }
  auto terms = split_outside_brackets(text, ',');
  if (!terms) return terms.error();
  std::vector<HostEntry> hosts;
  for (const std::string& term : *terms) {
    auto entries = parse_host_term(term, text);
    if (!entries) return entries.error();
    hosts.insert(hosts.end(), entries->begin(), entries->end());
  }
  return hosts;
}

std::vector<HostEntry> read_hostfile(std::string_view text, std::vector<LineProblem>& problems,
                                     std::vector<int>* lines) {
  std::vector<HostEntry> hosts;
  int line_number = 0;
  for (const std::string& raw : split(text, '\n')) {
    ++line_number;
    std::string_view line = raw;
    line = line.substr(0, line.find('#'));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineProblem problem;
    if (!parse_host_line(line, hosts, problem)) {
      problem.line = line_number;
      problems.push_back(std::move(problem));
    }
    // Each line's hostlist is capped, but a few hundred bytes of lines such as "n[0-65535]"
    // would still list millions of hosts and take the loader seconds (found by fuzz/hostfile).
    if (hosts.size() > kMaxExpandedHosts) {
      problems.push_back({line_number, 1, "the hostfile lists more than " + std::to_string(kMaxExpandedHosts) +
                                              " hosts by this line; check its ranges"});
      hosts.resize(kMaxExpandedHosts);
      if (lines) lines->resize(hosts.size(), line_number);
      break;
    }
    if (lines) lines->resize(hosts.size(), line_number);
  }
  return hosts;
}

Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& source_name) {
  std::vector<LineProblem> problems;
  std::vector<HostEntry> hosts = read_hostfile(text, problems);
  if (problems.empty() && hosts.empty()) {
    return Error::user(source_name + ": the hostfile lists no hosts; write one per line: 'worker-1 slots=4'");
  }
  if (!problems.empty()) {
    std::string message;
    for (const LineProblem& problem : problems) {
      if (!message.empty()) message += "\n";
      message += source_name + ":" + std::to_string(problem.line) + ":" + std::to_string(problem.column) +
                 ": " + problem.message;
    }
    return Error::user(message);
  }
  return hosts;
}

namespace {

struct FilterItem {
  std::string name;
  std::vector<int> slots;  // empty: the whole host
};

Result<std::vector<FilterItem>> parse_filter(std::string_view text, const char* what) {
  const std::string fix = std::string("; write ") + what + ": worker-0@worker-1:0,2";
  auto parts = split_outside_brackets(trim(text), '@');
  if (!parts) return Error::user(std::string(what) + ": " + parts.error().message);
  std::vector<FilterItem> items;
  for (const std::string& part : *parts) {
    std::string_view piece = trim(part);
    size_t colon = piece.find(':');
    auto names = expand_hostlist(piece.substr(0, colon));
    if (!names) return Error::user(std::string(what) + ": " + names.error().message + fix);
    std::vector<int> slots;
    if (colon != std::string_view::npos) {
      for (const std::string& slot : split(piece.substr(colon + 1), ',')) {
        long long value = 0;
        if (!parse_non_negative(trim(slot), value)) {
          return Error::user(std::string(what) + ": slot " + single_quoted(slot) + " in " + single_quoted(piece) +
                             " is not a slot number" + fix);
        }
        slots.push_back(static_cast<int>(value));
      }
    }
    for (std::string& name : *names) items.push_back({std::move(name), slots});
  }
  return items;
}

// The physical slot indices a host offers now.
std::vector<int> available_slots(const HostEntry& host) {
  if (!host.only_slots.empty()) return host.only_slots;
  std::vector<int> all;
  for (int i = 0; i < host.slots; ++i) all.push_back(i);
  return all;
}

}  // namespace

Result<std::vector<HostEntry>> apply_include_exclude(std::vector<HostEntry> hosts,
                                                     std::string_view include,
                                                     std::string_view exclude) {
  bool including = !trim(include).empty();
  bool excluding = !trim(exclude).empty();
  if (including && excluding) {
    return Error::user("include and exclude are both set; use one of them (include keeps only the hosts it names)");
  }
  if (!including && !excluding) return hosts;
  const char* what = including ? "include" : "exclude";
  auto items = parse_filter(including ? include : exclude, what);
  if (!items) return items.error();

  // Filter items by host name: scanning every item for every host made a filter over the largest
  // hostlist (65536 hosts) take the loader many seconds (found by fuzz/host_filters).
  std::unordered_map<std::string, std::vector<const FilterItem*>> items_by_host;
  for (const FilterItem& item : *items) items_by_host[item.name].push_back(&item);
  std::vector<std::string> known;
  std::unordered_set<std::string> known_names;
  for (const HostEntry& host : hosts) {
    known.push_back(host.name);
    known_names.insert(host.name);
  }
  for (const FilterItem& item : *items) {
    if (!known_names.count(item.name)) {
      std::string hint = closest_match(item.name, known);
      return Error::user(std::string(what) + ": unknown host " + single_quoted(item.name) +
                         (hint.empty() ? "" : "; did you mean " + single_quoted(hint) + "?") +
                         " (known hosts: " + join(known, ", ") + ")");
    }
  }

  std::vector<HostEntry> kept;
  for (HostEntry& host : hosts) {
    bool named = false, whole = false;
    std::set<int> listed;
    if (auto found = items_by_host.find(host.name); found != items_by_host.end()) {
      for (const FilterItem* item : found->second) {
        named = true;
        if (item->slots.empty()) whole = true;
        listed.insert(item->slots.begin(), item->slots.end());
      }
    }
    std::vector<int> available = available_slots(host);
    for (int slot : listed) {
      if (host.slots > 0 && std::find(available.begin(), available.end(), slot) == available.end()) {
        return Error::user(std::string(what) + ": " + host.name + " has no slot " + std::to_string(slot) +
                           " (its slots: " + std::to_string(available.front()) + ".." +
                           std::to_string(available.back()) + ")");
      }
    }
    if (including) {
      if (!named) continue;
      if (!whole) host.only_slots.assign(listed.begin(), listed.end());
    } else if (named) {
      if (whole) continue;
      std::vector<int> left;
      for (int slot : available) {
        if (!listed.count(slot)) left.push_back(slot);
      }
      if (left.empty()) continue;
      host.only_slots = std::move(left);
    }
    if (!host.only_slots.empty()) host.slots = static_cast<int>(host.only_slots.size());
    kept.push_back(std::move(host));
  }
  if (kept.empty()) return Error::user(std::string(what) + " leaves no hosts to run on");
  return kept;
}

bool is_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      ++i;
      continue;
    }
    size_t length = byte >= 0xc2 && byte <= 0xdf ? 2 : byte >= 0xe0 && byte <= 0xef ? 3 : byte >= 0xf0 && byte <= 0xf4 ? 4 : 0;
    if (length == 0 || i + length > text.size()) return i;
    // The second byte's range excludes overlong forms (e0, f0), surrogates (ed) and > U+10FFFF (f4).
    auto second = static_cast<unsigned char>(text[i + 1]);
    unsigned char low = byte == 0xe0 ? 0xa0 : byte == 0xf0 ? 0x90 : 0x80;
    unsigned char high = byte == 0xed ? 0x9f : byte == 0xf4 ? 0x8f : 0xbf;
    if (second < low || second > high) return i;
    for (size_t k = 2; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if (next < 0x80 || next > 0xbf) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

std::vector<std::pair<std::string, std::string>> read_env_file(std::string_view text,
                                                               std::vector<LineProblem>& problems) {
  std::vector<std::pair<std::string, std::string>> entries;
  int line_number = 0;
  for (const std::string& raw : split(text, '\n')) {
    ++line_number;
    std::string_view line = raw;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view content = trim(line);
    if (content.empty() || content[0] == '#') continue;
    int column = static_cast<int>(line.find(content[0])) + 1;
    size_t equals = content.find('=');
    std::string_view name = equals == std::string_view::npos ? content : trim(content.substr(0, equals));
    if (starts_with(name, "export ")) name = trim(name.substr(7));
    if (equals == std::string_view::npos || !is_env_name(name)) {
      problems.push_back({line_number, column,
                          single_quoted(content) + " is not a KEY=VALUE line; write NAME=value (NAME of letters, digits, '_')"});
      continue;
    }
    std::string_view value = content.substr(equals + 1);
    if (size_t bad = find_invalid_utf8(value); bad != std::string_view::npos) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(value[bad]));
      problems.push_back({line_number, static_cast<int>(value.data() - line.data() + bad) + 1,
                          "the value of " + std::string(name) + " is not valid UTF-8 (byte " + byte +
                              "); save the file as UTF-8"});
      continue;
    }
    entries.emplace_back(std::string(name), std::string(value));
  }
  return entries;
}

}  // namespace dtrain::spec
