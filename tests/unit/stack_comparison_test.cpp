// The one comparison of hosts' software stacks (launcher/events/stack_comparison.h): the value
// most hosts have is the majority and a host with another known value differs; a tie names every
// host that has a known value; "unknown" (or an item a host did not report) is never a difference;
// a spare is judged against the hosts' majority. And the two events that carry it read back.

#include <doctest/doctest.h>

#include "launcher/events/event.h"
#include "launcher/events/stack_comparison.h"

using namespace dtrain::events;
using dtrain::Result;

namespace {

HostStack host(const std::string& name, std::vector<StackItem> items) { return HostStack{name, std::move(items)}; }

}  // namespace

TEST_CASE("stack comparison: the host that differs from the majority is named with both values") {
  StackComparison compared = compare_stacks({host("h1", {{"python", "3.11.2"}, {"torch", "2.3.1"}}),
                                             host("h2", {{"python", "3.11.2"}, {"torch", "2.3.1"}}),
                                             host("h3", {{"python", "3.11.2"}, {"torch", "9.9.9"}})});
  REQUIRE(compared.differences.size() == 1);
  CHECK(compared.differences[0] == StackDifference{"h3", "torch", "9.9.9", "2.3.1", 2});
  CHECK(compared.tied.empty());
  CHECK(compared.unknown.empty());
  REQUIRE(compared.reference.size() == 2);
  CHECK(compared.reference[1] == StackItem{"torch", "2.3.1"});
  CHECK(compared.reference_hosts[1] == 2);
}

TEST_CASE("stack comparison: the same stack everywhere has no differences") {
  std::vector<HostStack> same{host("h1", {{"os", "Debian 12"}, {"file train.py", "ab"}}),
                              host("h2", {{"os", "Debian 12"}, {"file train.py", "ab"}})};
  StackComparison compared = compare_stacks(same);
  CHECK(compared.differences.empty());
  CHECK(compared.reference.size() == 2);
  // One host alone is its own reference: nothing to compare, nothing differs.
  CHECK(compare_stacks({same[0]}).differences.empty());
  CHECK(compare_stacks({}).differences.empty());
}

TEST_CASE("stack comparison: a tie has no majority, and every host with a known value is named") {
  StackComparison two = compare_stacks({host("h1", {{"torch", "2.1.0"}}), host("h2", {{"torch", "2.2.0"}})});
  REQUIRE(two.differences.size() == 2);
  CHECK(two.differences[0] == StackDifference{"h1", "torch", "2.1.0", "", 0});
  CHECK(two.differences[1] == StackDifference{"h2", "torch", "2.2.0", "", 0});
  CHECK(two.tied == std::vector<std::string>{"torch"});
  CHECK(two.reference.empty());

  // 2 against 2, and 1: no value has the most; all five are named.
  std::vector<HostStack> five{host("a", {{"nccl", "2.18"}}), host("b", {{"nccl", "2.18"}}), host("c", {{"nccl", "2.21"}}),
                              host("d", {{"nccl", "2.21"}}), host("e", {{"nccl", "2.19"}})};
  CHECK(compare_stacks(five).differences.size() == 5);
  // 2 against 1 and 1: the 2 are the majority (most hosts, not more than half).
  five.pop_back();
  five[3].items[0].value = "2.19";
  StackComparison plurality = compare_stacks(five);
  REQUIRE(plurality.differences.size() == 2);
  CHECK(plurality.differences[0].host == "c");
  CHECK(plurality.differences[0].majority == "2.18");
  CHECK(plurality.differences[1].host == "d");
}

TEST_CASE("stack comparison: unknown values and unreported items are never a difference, but are listed") {
  StackComparison compared =
      compare_stacks({host("h1", {{"torch", "2.3.1"}, {"image", "unknown (in a container)"}}),
                      host("h2", {{"torch", "unknown"}, {"image", "sha256:aa"}}),
                      host("h3", {{"image", "sha256:aa"}})});  // an agent that said no torch at all
  CHECK(compared.differences.empty());
  CHECK(compared.unknown == std::vector<std::string>{"h2: torch", "h3: torch", "h1: image"});
  // Every host unknown: no reference for that item, nothing to hold against anyone.
  StackComparison none = compare_stacks({host("h1", {{"torch", "unknown"}}), host("h2", {{"torch", "unknown (killed)"}})});
  CHECK(none.differences.empty());
  CHECK(none.reference.empty());
  CHECK(unknown_text(compared.unknown, 3) == "torch (h2, h3), image (h1)");
  CHECK(unknown_text({"a: image", "b: image", "c: python"}, 2) == "image (every host), python (c)");
  CHECK(is_unknown_stack_value("unknown"));
  CHECK(is_unknown_stack_value("unknown (python did not finish within 5s)"));
  CHECK_FALSE(is_unknown_stack_value("none"));
  CHECK_FALSE(is_unknown_stack_value("unknownish"));
}

TEST_CASE("stack comparison: a spare is judged against the hosts' majority, and against no one on a tie") {
  StackComparison compared = compare_stacks({host("h1", {{"torch", "2.3.1"}, {"cuda", "12.4"}}),
                                             host("h2", {{"torch", "2.3.1"}, {"cuda", "12.1"}})});
  REQUIRE(compared.tied == std::vector<std::string>{"cuda"});
  CHECK(stack_differences(compared, host("s1", {{"torch", "2.3.1"}})).empty());
  CHECK(stack_differences(compared, host("s1", {{"torch", "unknown"}, {"cuda", "unknown"}})).empty());
  std::vector<StackDifference> differs = stack_differences(compared, host("s1", {{"torch", "9.9.9"}, {"cuda", "12.4"}}));
  REQUIRE(differs.size() == 2);
  CHECK(differs[0] == StackDifference{"s1", "torch", "9.9.9", "2.3.1", 2});
  CHECK(differs[1] == StackDifference{"s1", "cuda", "12.4", "", 0});  // the hosts disagree: no value is safe
}

TEST_CASE("stack events: read back, one line of text, and the differences side by side") {
  HostStack stack{"h1", {{"torch", "2.3.1"}, {"file train.py", "ab12"}}, 42, {"note"}};
  Result<Event> read = parse_event(stack.to_json());
  REQUIRE(read);
  CHECK(std::get<HostStack>(*read) == stack);

  StackConsistency refused{"strict", StackConsistency::kDiffers, StackConsistency::kRefused, {"h1", "h2", "h3"},
                           {{"h3", "torch", "9.9.9", "2.3.1", 2}, {"h3", "file train.py", "cd34", "ab12", 2}}, {}, "h3"};
  read = parse_event(refused.to_json());
  REQUIRE(read);
  CHECK(std::get<StackConsistency>(*read) == refused);
  CHECK(refused.differing_hosts() == std::vector<std::string>{"h3"});
  CHECK(refused.text() ==
        "h3 differs: torch 9.9.9 (majority 2.3.1), file train.py cd34 (majority ab12) - refused (consistency strict)");
  std::vector<std::string> table = stack_difference_table(refused.differences);
  REQUIRE(table.size() == 3);
  CHECK(table[0] == "HOST  ITEM           THIS HOST  MAJORITY");
  CHECK(table[1] == "h3    torch          9.9.9      2.3.1 (2 hosts)");
  CHECK(table[2] == "h3    file train.py  cd34       ab12 (2 hosts)");

  StackConsistency same{"warn", StackConsistency::kSame, StackConsistency::kStarted, {"h1", "h2"}, {}, {"h2: image"}, ""};
  CHECK(same.text() == "same on 2 hosts; 1 item(s) could not be read (consistency warn)");
  // A differences entry of the wrong type is an error naming it, never an exception.
  nlohmann::json bad = refused.to_json();
  bad["differences"][0]["majority_hosts"] = "two";
  Result<Event> broken = parse_event(bad);
  REQUIRE_FALSE(broken);
  CHECK(broken.error().message.find("differences[0]") != std::string::npos);
}
