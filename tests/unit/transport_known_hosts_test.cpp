// known_hosts as the libssh2 client reads it (launcher/transport/ssh_known_hosts.h): plain,
// wildcard, negated, [host]:port and hashed host fields (hashed by `ssh-keygen -H` itself), the
// @revoked and @cert-authority markers, several files in order (user, then global), and bad
// lines that warn with file:line without disabling the rest.

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/transport/ssh_digest.h"
#include "launcher/transport/ssh_known_hosts.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::transport;
using dtrain::testing::TempDir;

namespace {

/// An SSH wire blob "ssh-ed25519" + 32 key bytes filled with `fill`.
std::string ed25519_blob(char fill) {
  auto wire = [](const std::string& text) {
    std::string out(4, '\0');
    out[3] = static_cast<char>(text.size());
    return out + text;
  };
  return wire("ssh-ed25519") + wire(std::string(32, fill));
}

std::string line(const std::string& hosts, char fill, const std::string& marker = "") {
  return (marker.empty() ? "" : marker + " ") + hosts + " ssh-ed25519 " + base64_encode(ed25519_blob(fill)) + " comment\n";
}

int run(const std::string& command) { return std::system(command.c_str()); }

}  // namespace

TEST_CASE("known_hosts host patterns: plain, lists, wildcards, negation, ports, case") {
  CHECK(host_patterns_match("gpu01", "gpu01"));
  CHECK_FALSE(host_patterns_match("gpu01", "gpu010"));
  CHECK(host_patterns_match("gpu01,10.0.0.1", "10.0.0.1"));
  CHECK(host_patterns_match("*.gpu.example.com", "n17.gpu.example.com"));
  CHECK_FALSE(host_patterns_match("*.gpu.example.com", "gpu.example.com"));
  CHECK(host_patterns_match("n?.gpu", "n7.gpu"));
  CHECK_FALSE(host_patterns_match("n?.gpu", "n17.gpu"));
  CHECK_FALSE(host_patterns_match("*.gpu,!bad.gpu", "bad.gpu"));  // a negated match wins
  CHECK(host_patterns_match("*.gpu,!bad.gpu", "good.gpu"));
  CHECK(host_patterns_match("GPU01", known_hosts_name("gpu01", 22)));
  CHECK(known_hosts_name("GPU01", 2222) == "[gpu01]:2222");
  CHECK(host_patterns_match("[gpu01]:2222", known_hosts_name("gpu01", 2222)));
  // OpenSSH does not take a plain entry for another port.
  CHECK_FALSE(host_patterns_match("gpu01", known_hosts_name("gpu01", 2222)));
  CHECK(host_patterns_match("[*.gpu]:2222", known_hosts_name("n1.gpu", 2222)));
}

TEST_CASE("known_hosts: hashed entries written by ssh-keygen -H match their host, and only it") {
  TempDir dir;
  REQUIRE(run("ssh-keygen -q -t ed25519 -N '' -f " + dir.path + "/key") == 0);
  std::string key = std::string(trim(*read_file(dir.path + "/key.pub")));
  auto fields = split(key, ' ');
  std::string plain = dir.write("known_hosts", "gpu01 " + fields[0] + " " + fields[1] + "\n[gpu02]:2222 " + fields[0] +
                                                   " " + fields[1] + "\n");
  REQUIRE(run("ssh-keygen -q -H -f " + plain + " >/dev/null 2>&1") == 0);
  std::string hashed = *read_file(plain);
  REQUIRE(hashed.find("|1|") == 0);
  REQUIRE(hashed.find("gpu01") == std::string::npos);
  std::string blob;
  REQUIRE(base64_decode(fields[1], blob));
  KnownHostsFile file = parse_known_hosts(hashed, plain);
  REQUIRE(file.entries.size() == 2);
  CHECK(host_patterns_match(file.entries[0].patterns, "gpu01"));
  CHECK_FALSE(host_patterns_match(file.entries[0].patterns, "gpu02"));
  CHECK(host_patterns_match(file.entries[1].patterns, known_hosts_name("gpu02", 2222)));
  auto check = check_known_host({plain}, "gpu01", 22, blob, "ssh-ed25519");
  REQUIRE(check.ok());
  CHECK(check->verdict == KnownHostVerdict::match);
  CHECK(check->where() == plain + ":1");
}

TEST_CASE("known_hosts verdicts across the user's and the global file") {
  TempDir dir;
  std::string user = dir.write("known_hosts", "# mine\n" + line("gpu01", 'a') + "this line is garbage\n" +
                                                  line("gpu02", 'b'));
  std::string global = dir.write("ssh_known_hosts", line("*.site,gpu03", 'c') + line("*", 'r', "@revoked") +
                                                        line("*.certs", 'z', "@cert-authority") +
                                                        line("gpu02", 'q'));
  std::vector<std::string> files{user, global, dir.path + "/missing"};

  auto verdict = [&](const std::string& host, char fill) {
    auto check = check_known_host(files, host, 22, ed25519_blob(fill), "ssh-ed25519");
    REQUIRE(check.ok());
    return *check;
  };
  KnownHostCheck known = verdict("gpu01", 'a');
  CHECK(known.verdict == KnownHostVerdict::match);
  CHECK(known.where() == user + ":2");
  // The bad line is a warning naming file:line; the lines after it still count.
  REQUIRE(known.warnings.size() == 1);
  CHECK(known.warnings[0].find(user + ":3: ") == 0);
  CHECK(verdict("gpu02", 'b').verdict == KnownHostVerdict::match);

  // Only the global file knows gpu03 and *.site (a wildcard line, as admins write them).
  CHECK(verdict("gpu03", 'c').where() == global + ":1");
  CHECK(verdict("n5.site", 'c').verdict == KnownHostVerdict::match);

  // A different key of the same type: mismatch at the first line with one. A match in another
  // file wins, as in OpenSSH (gpu02 holds 'b' in the user file and 'q' in the global one).
  KnownHostCheck changed = verdict("gpu01", 'x');
  CHECK(changed.verdict == KnownHostVerdict::mismatch);
  CHECK(changed.where() == user + ":2");
  CHECK(verdict("gpu02", 'q').verdict == KnownHostVerdict::match);

  // @revoked "*" refuses key 'r' for any host, even one that lists it as known.
  CHECK(verdict("gpu01", 'r').verdict == KnownHostVerdict::revoked);
  CHECK(verdict("gpu01", 'r').where() == global + ":2");

  // Nothing for gpu09; a @cert-authority line covers n1.certs (no key check possible here).
  KnownHostCheck unknown = verdict("gpu09", 'a');
  CHECK(unknown.verdict == KnownHostVerdict::not_found);
  CHECK(unknown.cert_authority.empty());
  KnownHostCheck vouched = verdict("n1.certs", 'a');
  CHECK(vouched.verdict == KnownHostVerdict::not_found);
  CHECK(vouched.cert_authority == global + ":3");
  CHECK(covering_cert_authority(files, "n1.certs", 22) == global + ":3");

  // Key types known for a host, in file order (for the handshake's algorithm preference).
  CHECK(known_key_types(files, "gpu01", 22) == std::vector<std::string>{"ssh-ed25519"});
  CHECK(known_key_types(files, "gpu09", 22).empty());
}

TEST_CASE("known_hosts lines that are not understood are reported, never fatal") {
  std::string text = line("gpu01", 'a', "@bogus") + "gpu02 ssh-ed25519\n" + "gpu03 ssh-ed25519 !!notbase64\n" +
                     "gpu04 ecdsa-sha2-nistp256 " + base64_encode(ed25519_blob('a')) + "\n" + line("gpu05", 'e');
  KnownHostsFile file = parse_known_hosts(text, "kh");
  REQUIRE(file.entries.size() == 1);
  CHECK(file.entries[0].patterns == "gpu05");
  CHECK(file.entries[0].line == 5);
  REQUIRE(file.warnings.size() == 4);
  CHECK(file.warnings[0].find("kh:1: unknown marker '@bogus'") == 0);
  CHECK(file.warnings[1].find("kh:2: line not understood (expected") == 0);
  CHECK(file.warnings[2].find("kh:3: line not understood") == 0);
  CHECK(file.warnings[3].find("kh:4: line not understood (the key is not a valid ecdsa-sha2-nistp256 key") == 0);
}
