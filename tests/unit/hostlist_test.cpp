// Hostlists (Slurm/pdsh), hostfiles (DeepSpeed/Open MPI) and include/exclude filters.

#include <doctest/doctest.h>
#include <unistd.h>

#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using namespace dtrain::spec;

namespace {

std::vector<std::string> expand(std::string_view text) {
  auto names = expand_hostlist(text);
  REQUIRE_MESSAGE(names.ok(), names.error().message);
  return *names;
}

std::string expand_error(std::string_view text) {
  auto names = expand_hostlist(text);
  REQUIRE_FALSE(names.ok());
  return names.error().message;
}

std::vector<HostEntry> hosts(std::initializer_list<std::pair<const char*, int>> list) {
  std::vector<HostEntry> out;
  for (auto [name, slots] : list) {
    HostEntry entry;
    entry.name = name;
    entry.slots = slots;
    out.push_back(entry);
  }
  return out;
}

}  // namespace

TEST_CASE("hostlist: ranges keep zero padding, lists and several ranges") {
  using V = std::vector<std::string>;
  CHECK(expand("gpu01") == V{"gpu01"});
  CHECK(expand("gpu[01-04,07]") == V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"});
  CHECK(expand("node[8-11]") == V{"node8", "node9", "node10", "node11"});
  CHECK(expand("n[098-101]") == V{"n098", "n099", "n100", "n101"});
  CHECK(expand("rack[1-2]-gpu[1-2]") == V{"rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"});
  CHECK(expand("a,b[1-2],c") == V{"a", "b1", "b2", "c"});
  CHECK(expand("[1-2]x") == V{"1x", "2x"});
  CHECK(expand(" worker-0.cluster.local ") == V{"worker-0.cluster.local"});
}

TEST_CASE("hostlist: malformed expressions are errors that quote them") {
  CHECK(expand_error("gpu[01-04").find("'gpu[01-04' has a '[' without ']'") != std::string::npos);
  CHECK(expand_error("gpu01-04]").find("']' without '['") != std::string::npos);
  CHECK(expand_error("gpu[[1-2]]").find("nested") != std::string::npos);
  CHECK(expand_error("gpu[4-1]").find("runs backwards; write 1-4") != std::string::npos);
  CHECK(expand_error("gpu[a-b]").find("'a-b' is not a number or range") != std::string::npos);
  CHECK(expand_error("gpu[]").find("is not a number or range") != std::string::npos);
  CHECK(expand_error("a,,b").find("empty host name") != std::string::npos);
  CHECK(expand_error("gpu 1").find("contains ' '") != std::string::npos);
  CHECK(expand_error("").find("empty hostlist") != std::string::npos);
  CHECK(expand_error("n[0-99999999]").find("more than 65536 hosts") != std::string::npos);
  CHECK(expand_error("a[0-999]b[0-999]").find("more than 65536 hosts") != std::string::npos);
}

TEST_CASE("hostfile: DeepSpeed/Open MPI lines, comments and bare hosts") {
  auto parsed = parse_hostfile(
      "# the cluster\n"
      "worker-1 slots=4\n"
      "\n"
      "worker-2   slots=8   # a comment\n"
      "worker-3\n"
      "alice@worker-4:2222 slots=2 max_slots=4\n"
      "gpu[01-02] slots=1\r\n",
      "hostfile");
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  REQUIRE(parsed->size() == 6);
  CHECK((*parsed)[0].name == "worker-1");
  CHECK((*parsed)[0].slots == 4);
  CHECK((*parsed)[1].slots == 8);
  CHECK((*parsed)[2].name == "worker-3");
  CHECK((*parsed)[2].slots == 0);  // the loader fills slots_per_host
  CHECK((*parsed)[3].user == "alice");
  CHECK((*parsed)[3].port == 2222);
  CHECK((*parsed)[3].slots == 2);
  CHECK((*parsed)[5].name == "gpu02");
}

TEST_CASE("hostfile: every bad line is reported as file:line:col") {
  auto parsed = parse_hostfile("good slots=1\nbad slots=x\nalso slots=0\nweird cpus=4\n", "hosts.txt");
  REQUIRE_FALSE(parsed.ok());
  const std::string& message = parsed.error().message;
  CHECK(message.find("hosts.txt:2:5: 'slots=x': slots must be a whole number of 1 or more") != std::string::npos);
  CHECK(message.find("hosts.txt:3:6: 'slots=0'") != std::string::npos);
  CHECK(message.find("hosts.txt:4:7: unknown attribute 'cpus=4'; write 'host slots=N'") != std::string::npos);
  CHECK_FALSE(parse_hostfile("# nothing\n\n", "empty").ok());
}

TEST_CASE("include keeps the named hosts, and only the named slots") {
  auto filtered = apply_include_exclude(hosts({{"worker-0", 4}, {"worker-1", 4}, {"worker-2", 4}}),
                                        "worker-0@worker-1:0,2", "");
  REQUIRE_MESSAGE(filtered.ok(), filtered.error().message);
  REQUIRE(filtered->size() == 2);
  CHECK((*filtered)[0].name == "worker-0");
  CHECK((*filtered)[0].slots == 4);
  CHECK((*filtered)[0].only_slots.empty());
  CHECK((*filtered)[1].name == "worker-1");
  CHECK((*filtered)[1].slots == 2);
  CHECK((*filtered)[1].only_slots == std::vector<int>{0, 2});
}

TEST_CASE("exclude removes whole hosts or single slots") {
  auto filtered = apply_include_exclude(hosts({{"worker-0", 4}, {"worker-1", 4}, {"worker-2", 2}}), "",
                                        "worker-0@worker-1:1,3@worker-2:0,1");
  REQUIRE_MESSAGE(filtered.ok(), filtered.error().message);
  REQUIRE(filtered->size() == 1);  // worker-2 lost both its slots
  CHECK((*filtered)[0].name == "worker-1");
  CHECK((*filtered)[0].only_slots == std::vector<int>{0, 2});
  CHECK((*filtered)[0].slots == 2);
}

TEST_CASE("include/exclude accept hostlist expressions") {
  auto filtered = apply_include_exclude(hosts({{"gpu01", 1}, {"gpu02", 1}, {"gpu03", 1}}), "gpu[01-02]", "");
  REQUIRE(filtered.ok());
  CHECK(filtered->size() == 2);
}

TEST_CASE("include/exclude errors name the host and list the known ones") {
  auto unknown = apply_include_exclude(hosts({{"worker-0", 4}, {"worker-1", 4}}), "worker-9", "");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message ==
        "include: unknown host 'worker-9'; did you mean 'worker-0'? (known hosts: worker-0, worker-1)");
  auto both = apply_include_exclude(hosts({{"a", 1}}), "a", "a");
  REQUIRE_FALSE(both.ok());
  CHECK(both.error().message.find("both set") != std::string::npos);
  auto bad_slot = apply_include_exclude(hosts({{"a", 2}}), "a:5", "");
  REQUIRE_FALSE(bad_slot.ok());
  CHECK(bad_slot.error().message == "include: a has no slot 5 (its slots: 0..1)");
  auto not_number = apply_include_exclude(hosts({{"a", 2}}), "", "a:x");
  REQUIRE_FALSE(not_number.ok());
  CHECK(not_number.error().message.find("slot 'x' in 'a:x' is not a slot number") != std::string::npos);
  auto nothing_left = apply_include_exclude(hosts({{"a", 2}}), "", "a");
  REQUIRE_FALSE(nothing_left.ok());
  CHECK(nothing_left.error().message == "exclude leaves no hosts to run on");
}

TEST_CASE("is_local: localhost, loopback addresses and this machine's name") {
  HostEntry host;
  for (const char* name : {"localhost", "127.0.0.1", "::1"}) {
    host.name = name;
    CHECK(host.is_local());
  }
  char buffer[256] = {};
  REQUIRE(gethostname(buffer, sizeof buffer - 1) == 0);
  host.name = buffer;
  CHECK(host.is_local());
  host.name = "gpu01.example.invalid";
  CHECK_FALSE(host.is_local());
}

TEST_CASE("host expressions: IPv6 literals are accepted, other text with two colons is not") {
  for (const char* address : {"::1", "fe80::1%eth0", "root@2001:db8::7", "::ffff:192.0.2.1"}) {
    auto parsed = parse_host_expression(address);
    CHECK_MESSAGE(parsed.ok(), address);
  }
  // Found by fuzz/hostlist: these were taken as IPv6 addresses and handed to the resolver.
  for (const char* typo : {"gpu01:22:x", "alice@g@gpu[01-03]:222pu[01-03]:2222", "fe80::h", "fe80::1%"}) {
    auto parsed = parse_host_expression(typo);
    REQUIRE_FALSE_MESSAGE(parsed.ok(), typo);
    CHECK(parsed.error().message.find("is neither a host name nor an IPv6 address") != std::string::npos);
  }
}

TEST_CASE("hostfile: more than 65536 hosts in all is an error at the line that passes the limit") {
  // Found by fuzz/hostfile: each line's range is capped, but a few lines listed millions of hosts.
  std::string text;
  for (int i = 0; i < 8; ++i) text += "n" + std::to_string(i) + "[0-9999]\n";
  auto parsed = parse_hostfile(text, "hosts.txt");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().message == "hosts.txt:7:1: the hostfile lists more than 65536 hosts by this line; check its ranges");
}
