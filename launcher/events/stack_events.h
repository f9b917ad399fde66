#pragma once
// The software-stack events (issue 29 "one software stack"): host.stack, what each host's agent
// found at hello, and stack.consistency, the hosts compared before the first generation (or a
// spare against them). The fingerprint's own fields are the agent protocol's
// (launcher/proto/stack_fingerprint.h); here it is a list of named items, so that every reader
// (status, the report, the registry, `dtrain hosts`) shows and compares them without knowing
// which items exist. Included by events.h; the comparison itself is stack_comparison.h.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/events/event_catalogue.h"

namespace dtrain::events {

/// One item of a host's software stack: {"torch", "2.3.1"}, {"file train.py", "<sha256>"}. A
/// value that could not be read is "unknown" or "unknown (why)" (is_unknown_stack_value).
struct StackItem {
  std::string item{};
  std::string value{};
  nlohmann::json to_json() const;
  static Result<StackItem> from_json(const nlohmann::json& object);
  bool operator==(const StackItem&) const = default;
};

/// host.stack: one host's fingerprint, as its agent reported it at hello.
struct HostStack {
  static constexpr const char* name = kHostStack;
  std::string host{};
  std::vector<StackItem> items{};
  int64_t ms = 0;                    ///< how long the agent took to gather it
  std::vector<std::string> notes{};  ///< why an item is unknown ("python: killed after 5s")
  /// The value of `item`, or nullptr when the host did not report it.
  const std::string* value_of(const std::string& item) const;
  nlohmann::json to_json() const;
  static Result<HostStack> from_json(const nlohmann::json& event);
  bool operator==(const HostStack&) const = default;
};

/// One item on which one host differs from the others.
struct StackDifference {
  std::string host{};
  std::string item{};
  std::string value{};     ///< this host's
  std::string majority{};  ///< the value most hosts have; "" when no value has the most (a tie)
  int majority_hosts = 0;  ///< how many hosts have it
  nlohmann::json to_json() const;
  static Result<StackDifference> from_json(const nlohmann::json& object);
  bool operator==(const StackDifference&) const = default;
};

/// stack.consistency: what the comparison found and what the run did about it.
struct StackConsistency {
  static constexpr const char* name = kStackConsistency;
  static constexpr const char* kSame = "same";        ///< verdict: no known value differs
  static constexpr const char* kDiffers = "differs";  ///< verdict
  static constexpr const char* kStarted = "started";    ///< action: the stacks agree
  static constexpr const char* kRefused = "refused";    ///< action: strict, a host differs
  static constexpr const char* kWarned = "warned";      ///< action: warn, started anyway
  static constexpr const char* kSpareLeftOut = "spare left out";  ///< action: a spare differs
  std::string mode{};    ///< the spec's consistency: strict or warn
  std::string verdict{};
  std::string action{};
  std::vector<std::string> hosts{};  ///< the hosts compared (a spare: that spare)
  std::vector<StackDifference> differences{};
  /// "host: item" whose value could not be read: not held against the host, but said.
  std::vector<std::string> unknown{};
  std::string detail{};  ///< one sentence: what differs and what the run did
  /// The hosts named by `differences`, in order.
  std::vector<std::string> differing_hosts() const;
  /// One line for `dtrain status`: "same on 3 hosts (strict)" or "dt-h3 differs: torch 9.9.9
  /// (majority 2.3.1) - refused (strict)".
  std::string text() const;
  nlohmann::json to_json() const;
  static Result<StackConsistency> from_json(const nlohmann::json& event);
  bool operator==(const StackConsistency&) const = default;
};

/// `differences` side by side, one line each after a header: host, item, its value, the
/// majority's value and how many hosts have it. For consoles, `dtrain hosts` and summaries.
std::vector<std::string> stack_difference_table(const std::vector<StackDifference>& differences);

}  // namespace dtrain::events
