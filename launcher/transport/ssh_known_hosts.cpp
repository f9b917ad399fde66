#include "launcher/transport/ssh_known_hosts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/transport/ssh_digest.h"

namespace dtrain::transport {
namespace {

/// A known_hosts of 64 MiB holds some 100,000 host keys: far beyond any site.
constexpr size_t kMaxKnownHostsBytes = size_t{64} << 20;

std::string lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

/// Splits on runs of blanks.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    if (at >= line.size()) break;
    size_t end = at;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    fields.push_back(line.substr(at, end - at));
    at = end;
  }
  return fields;
}

/// The type name inside a public key blob (its first SSH string), or "".
std::string blob_type(const std::string& blob) {
  if (blob.size() < 4) return {};
  uint32_t length = (uint32_t(uint8_t(blob[0])) << 24) | (uint32_t(uint8_t(blob[1])) << 16) |
                    (uint32_t(uint8_t(blob[2])) << 8) | uint32_t(uint8_t(blob[3]));
  if (length > blob.size() - 4) return {};
  return blob.substr(4, length);
}

/// OpenSSH's match_pattern: '*' any run, '?' any one character.
bool wildcard_match(std::string_view text, std::string_view pattern) {
  size_t t = 0, p = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++t;
      ++p;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

/// "|1|base64(salt)|base64(HMAC-SHA1(salt, name))".
bool hashed_match(std::string_view entry, const std::string& name) {
  std::string_view rest = entry.substr(3);
  size_t bar = rest.find('|');
  if (bar == std::string_view::npos) return false;
  std::string salt, hash;
  if (!base64_decode(rest.substr(0, bar), salt) || !base64_decode(rest.substr(bar + 1), hash)) return false;
  return !hash.empty() && hmac_sha1(salt, name) == hash;
}

std::vector<KnownHostsFile> read_all(const std::vector<std::string>& files, std::vector<std::string>* warnings) {
  std::vector<KnownHostsFile> read;
  for (const std::string& path : files) {
    if (path.empty()) continue;
    Result<KnownHostsFile> file = read_known_hosts(path);
    if (!file) {
      if (warnings) warnings->push_back(file.error().message);
      continue;
    }
    if (warnings) warnings->insert(warnings->end(), file->warnings.begin(), file->warnings.end());
    read.push_back(std::move(*file));
  }
  return read;
}

}  // namespace

KnownHostsFile parse_known_hosts(std::string_view text, const std::string& path) {
  KnownHostsFile file;
  file.path = path;
  int number = 0;
  for (const std::string& raw : split(std::string(text), '\n')) {
    ++number;
    std::string_view line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    auto warn = [&](const std::string& what) {
      file.warnings.push_back(path + ":" + std::to_string(number) + ": " + what + "; line ignored, the other lines still count");
    };
    std::vector<std::string_view> fields = fields_of(line);
    KnownHostEntry entry;
    entry.line = number;
    size_t first = 0;
    if (fields[0][0] == '@') {
      if (fields[0] == "@revoked") entry.marker = KnownHostMarker::revoked;
      else if (fields[0] == "@cert-authority") entry.marker = KnownHostMarker::cert_authority;
      else {
        warn("unknown marker '" + std::string(fields[0]) + "'");
        continue;
      }
      first = 1;
    }
    if (fields.size() < first + 3) {
      warn("line not understood (expected '[marker] hosts key-type base64-key')");
      continue;
    }
    entry.patterns = std::string(fields[first]);
    entry.key_type = std::string(fields[first + 1]);
    if (!base64_decode(fields[first + 2], entry.key_blob) || blob_type(entry.key_blob) != entry.key_type) {
      warn("line not understood (the key is not a valid " + entry.key_type + " key: a typo, or a truncated line)");
      continue;
    }
    file.entries.push_back(std::move(entry));
  }
  return file;
}

Result<KnownHostsFile> read_known_hosts(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return KnownHostsFile{path, {}, {}};
  // A FIFO or a device here would stall every connection: refused at once (read_regular_file).
  Result<std::string> text = read_regular_file(path, kMaxKnownHostsBytes, FollowLinks::kYes,
                                               "a known_hosts file is far smaller (is it the right file?)");
  if (!text) return Error::user("ssh.known_hosts: " + text.error().message);
  return parse_known_hosts(*text, path);
}

std::string known_hosts_name(const std::string& host, int port) {
  std::string lower = lowercase(host);
  return port == 22 ? lower : "[" + lower + "]:" + std::to_string(port);
}

bool host_patterns_match(std::string_view patterns, const std::string& name) {
  if (starts_with(patterns, "|1|")) return hashed_match(patterns, name);
  bool matched = false;
  for (const std::string& raw : split(std::string(patterns), ',')) {
    std::string_view pattern = raw;
    bool negated = !pattern.empty() && pattern[0] == '!';
    if (negated) pattern.remove_prefix(1);
    if (pattern.empty() || !wildcard_match(name, lowercase(pattern))) continue;
    if (negated) return false;
    matched = true;
  }
  return matched;
}

Result<KnownHostCheck> check_known_host(const std::vector<std::string>& files, const std::string& host, int port,
                                        std::string_view key_blob, const std::string& key_type) {
  KnownHostCheck check;
  std::string name = known_hosts_name(host, port);
  std::string match_file, mismatch_file;
  int match_line = 0, mismatch_line = 0;
  for (const KnownHostsFile& file : read_all(files, &check.warnings)) {
    for (const KnownHostEntry& entry : file.entries) {
      if (!host_patterns_match(entry.patterns, name)) continue;
      bool same_key = entry.key_blob == key_blob;
      switch (entry.marker) {
        case KnownHostMarker::revoked:
          if (same_key) {
            check.verdict = KnownHostVerdict::revoked;
            check.file = file.path;
            check.line = entry.line;
            return check;
          }
          break;
        case KnownHostMarker::cert_authority:
          if (check.cert_authority.empty()) check.cert_authority = file.path + ":" + std::to_string(entry.line);
          break;
        case KnownHostMarker::none:
          if (same_key && !match_line) {
            match_file = file.path;
            match_line = entry.line;
          } else if (!same_key && entry.key_type == key_type && !mismatch_line) {
            mismatch_file = file.path;
            mismatch_line = entry.line;
          }
          break;
      }
    }
  }
  if (match_line) {
    check.verdict = KnownHostVerdict::match;
    check.file = match_file;
    check.line = match_line;
  } else if (mismatch_line) {
    check.verdict = KnownHostVerdict::mismatch;
    check.file = mismatch_file;
    check.line = mismatch_line;
  }
  return check;
}

std::vector<std::string> known_key_types(const std::vector<std::string>& files, const std::string& host, int port) {
  std::vector<std::string> types;
  std::string name = known_hosts_name(host, port);
  for (const KnownHostsFile& file : read_all(files, nullptr)) {
    for (const KnownHostEntry& entry : file.entries) {
      if (entry.marker != KnownHostMarker::none || !host_patterns_match(entry.patterns, name)) continue;
      if (std::find(types.begin(), types.end(), entry.key_type) == types.end()) types.push_back(entry.key_type);
    }
  }
  return types;
}

std::string covering_cert_authority(const std::vector<std::string>& files, const std::string& host, int port) {
  std::string name = known_hosts_name(host, port);
  for (const KnownHostsFile& file : read_all(files, nullptr)) {
    for (const KnownHostEntry& entry : file.entries) {
      if (entry.marker == KnownHostMarker::cert_authority && host_patterns_match(entry.patterns, name)) {
        return file.path + ":" + std::to_string(entry.line);
      }
    }
  }
  return "";
}

Status append_known_host(const std::string& path, const std::string& host, int port,
                         const std::string& key_type_name, std::string_view key_blob) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Error::infra(dir + ": cannot create directory for known_hosts: " + errno_text(errno));
    }
  }
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return Error::infra(path + ": cannot open known_hosts to record a key: " + errno_text(errno));
  std::string line = known_hosts_name(host, port) + " " + key_type_name + " " +
                     base64_encode(key_blob) + "\n";
  // Keep a last line without its newline intact.
  struct stat info {};
  if (::fstat(fd.get(), &info) == 0 && info.st_size > 0) {
    char last = '\n';
    if (::pread(fd.get(), &last, 1, info.st_size - 1) == 1 && last != '\n') line = "\n" + line;
  }
  return write_all(fd.get(), line);
}

}  // namespace dtrain::transport
