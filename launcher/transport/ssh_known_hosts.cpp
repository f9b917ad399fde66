#include "launcher/transport/ssh_known_hosts.h"

#include <fcntl.h>
#include <libssh2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <memory>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/transport/ssh_digest.h"

namespace dtrain::transport {
namespace {

struct CollectionFree {
  void operator()(LIBSSH2_KNOWNHOSTS* hosts) const { libssh2_knownhost_free(hosts); }
};
using Collection = std::unique_ptr<LIBSSH2_KNOWNHOSTS, CollectionFree>;

/// One usable known_hosts line, in a collection of its own so that a verdict names its line.
struct KnownLine {
  int number = 0;
  bool revoked = false;
  Collection hosts;
};

constexpr int kCandidateTypes[] = {LIBSSH2_KNOWNHOST_KEY_ED25519, LIBSSH2_KNOWNHOST_KEY_ECDSA_256,
                                   LIBSSH2_KNOWNHOST_KEY_ECDSA_384, LIBSSH2_KNOWNHOST_KEY_ECDSA_521,
                                   LIBSSH2_KNOWNHOST_KEY_SSHRSA};

/// Reads `path`; a missing file reads as empty (nothing is known yet).
Result<std::vector<KnownLine>> read_lines(LIBSSH2_SESSION* session, const std::string& path,
                                          std::vector<std::string>* warnings) {
  std::vector<KnownLine> lines;
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return lines;
  std::ifstream in(path);
  if (!in) return Error::user(path + ": cannot read known_hosts: " + errno_text(errno));
  std::string text;
  int number = 0;
  while (std::getline(in, text)) {
    ++number;
    std::string_view line = trim(text);
    if (line.empty() || line[0] == '#') continue;
    bool revoked = false;
    if (line[0] == '@') {
      size_t space = line.find_first_of(" \t");
      std::string_view marker = line.substr(0, space);
      if (marker == "@cert-authority") continue;  // certificates are not used by dtrain
      if (marker != "@revoked" || space == std::string_view::npos) {
        warnings->push_back(path + ":" + std::to_string(number) + ": unknown marker '" +
                            std::string(marker) + "'; line ignored");
        continue;
      }
      revoked = true;
      line = trim(line.substr(space));
    }
    Collection hosts(libssh2_knownhost_init(session));
    if (!hosts) return Error::infra("internal bug: libssh2_knownhost_init failed");
    if (libssh2_knownhost_readline(hosts.get(), line.data(), line.size(),
                                   LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0) {
      warnings->push_back(path + ":" + std::to_string(number) +
                          ": line not understood (key type unsupported by libssh2 or a typo); "
                          "ignored, the other lines still count");
      continue;
    }
    lines.push_back({number, revoked, std::move(hosts)});
  }
  return lines;
}

int check_line(const KnownLine& line, const std::string& name, std::string_view key, int type) {
  return libssh2_knownhost_checkp(line.hosts.get(), name.c_str(), -1, key.data(), key.size(),
                                  LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | type,
                                  nullptr);
}

}  // namespace

std::string known_hosts_name(const std::string& host, int port) {
  std::string lower = host;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // Port -1 below makes libssh2 match this exact string; its own port handling would also
  // accept a plain "host" entry for a non-standard port, which OpenSSH does not.
  return port == 22 ? lower : "[" + lower + "]:" + std::to_string(port);
}

Result<KnownHostCheck> check_known_host(LIBSSH2_SESSION* session, const std::string& path,
                                        const std::string& host, int port,
                                        std::string_view key_blob, int knownhost_key_type) {
  KnownHostCheck check;
  auto lines = read_lines(session, path, &check.warnings);
  if (!lines) return lines.error();
  std::string name = known_hosts_name(host, port);
  int match_line = 0;
  int mismatch_line = 0;
  for (const KnownLine& line : *lines) {
    int verdict = check_line(line, name, key_blob, knownhost_key_type);
    if (line.revoked) {
      if (verdict == LIBSSH2_KNOWNHOST_CHECK_MATCH) {
        check.verdict = KnownHostVerdict::revoked;
        check.line = line.number;
        return check;
      }
      continue;
    }
    if (verdict == LIBSSH2_KNOWNHOST_CHECK_MATCH && !match_line) match_line = line.number;
    if (verdict == LIBSSH2_KNOWNHOST_CHECK_MISMATCH && !mismatch_line) mismatch_line = line.number;
  }
  if (match_line) {
    check.verdict = KnownHostVerdict::match;
    check.line = match_line;
  } else if (mismatch_line) {
    check.verdict = KnownHostVerdict::mismatch;
    check.line = mismatch_line;
  }
  return check;
}

std::vector<int> known_key_types(LIBSSH2_SESSION* session, const std::string& path,
                                 const std::string& host, int port) {
  std::vector<std::string> ignored;
  auto lines = read_lines(session, path, &ignored);
  std::vector<int> types;
  if (!lines) return types;
  std::string name = known_hosts_name(host, port);
  // A deliberately wrong key: "mismatch" then means "there is an entry of this type".
  const std::string probe_key = "dtrain-probe";
  for (const KnownLine& line : *lines) {
    if (line.revoked) continue;
    for (int type : kCandidateTypes) {
      if (check_line(line, name, probe_key, type) == LIBSSH2_KNOWNHOST_CHECK_MISMATCH &&
          std::find(types.begin(), types.end(), type) == types.end()) {
        types.push_back(type);
      }
    }
  }
  return types;
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
