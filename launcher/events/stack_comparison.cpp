#include "launcher/events/stack_comparison.h"

#include <algorithm>
#include <map>

namespace dtrain::events {

bool is_unknown_stack_value(std::string_view value) {
  return value == "unknown" || value.rfind("unknown (", 0) == 0;
}

namespace {

/// Every item any host reported, in the order it first appears.
std::vector<std::string> items_in_order(const std::vector<HostStack>& hosts) {
  std::vector<std::string> items;
  for (const HostStack& host : hosts) {
    for (const StackItem& item : host.items) {
      if (std::find(items.begin(), items.end(), item.item) == items.end()) items.push_back(item.item);
    }
  }
  return items;
}

/// The known value of `item` on `host`, or nullptr (absent or unknown).
const std::string* known_value(const HostStack& host, const std::string& item) {
  const std::string* value = host.value_of(item);
  return value && !is_unknown_stack_value(*value) ? value : nullptr;
}

}  // namespace

std::string unknown_text(const std::vector<std::string>& unknown, size_t host_count) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_item;  // in order of appearance
  for (const std::string& entry : unknown) {
    size_t colon = entry.rfind(": ");
    std::string host = colon == std::string::npos ? entry : entry.substr(0, colon);
    std::string item = colon == std::string::npos ? "" : entry.substr(colon + 2);
    auto found = std::find_if(by_item.begin(), by_item.end(), [&](const auto& pair) { return pair.first == item; });
    if (found == by_item.end()) by_item.push_back({item, {host}});
    else found->second.push_back(host);
  }
  std::string text;
  for (const auto& [item, hosts] : by_item) {
    std::string where = hosts.size() >= host_count && host_count > 1 ? "every host"
                        : hosts.size() <= 3 ? ""
                                            : std::to_string(hosts.size()) + " hosts";
    if (where.empty()) {
      for (const std::string& host : hosts) where += (where.empty() ? "" : ", ") + host;
    }
    text += (text.empty() ? "" : ", ") + item + " (" + where + ")";
  }
  return text;
}

StackComparison compare_stacks(const std::vector<HostStack>& hosts) {
  StackComparison out;
  struct Verdict {
    std::string majority;  // "" when tied
    int majority_hosts = 0;
    bool differs = false;
  };
  std::map<std::string, Verdict> verdicts;
  for (const std::string& item : items_in_order(hosts)) {
    std::map<std::string, int> counts;
    for (const HostStack& host : hosts) {
      if (const std::string* value = known_value(host, item)) {
        ++counts[*value];
      } else {
        out.unknown.push_back(host.host + ": " + item);
      }
    }
    if (counts.empty()) continue;
    int most = 0;
    for (const auto& [value, count] : counts) most = std::max(most, count);
    std::vector<std::string> leaders;
    for (const auto& [value, count] : counts) {
      if (count == most) leaders.push_back(value);
    }
    Verdict verdict;
    verdict.differs = counts.size() > 1;
    if (leaders.size() == 1) {
      verdict.majority = leaders.front();
      verdict.majority_hosts = most;
      out.reference.push_back({item, leaders.front()});
      out.reference_hosts.push_back(most);
    } else {
      out.tied.push_back(item);
    }
    verdicts[item] = verdict;
  }
  // By host, then item: each host's differences read together.
  for (const HostStack& host : hosts) {
    for (const std::string& item : items_in_order(hosts)) {
      auto verdict = verdicts.find(item);
      if (verdict == verdicts.end() || !verdict->second.differs) continue;
      const std::string* value = known_value(host, item);
      if (!value || *value == verdict->second.majority) continue;
      out.differences.push_back({host.host, item, *value, verdict->second.majority, verdict->second.majority_hosts});
    }
  }
  return out;
}

StackConsistency consistency_of(const StackComparison& compared, const std::string& mode,
                                const std::vector<HostStack>& hosts) {
  StackConsistency verdict;
  verdict.mode = mode;
  for (const HostStack& host : hosts) verdict.hosts.push_back(host.host);
  verdict.differences = compared.differences;
  verdict.unknown = compared.unknown;
  const bool differs = !verdict.differences.empty();
  verdict.verdict = differs ? StackConsistency::kDiffers : StackConsistency::kSame;
  verdict.action = !differs ? StackConsistency::kStarted : mode == "strict" ? StackConsistency::kRefused : StackConsistency::kWarned;
  return verdict;
}

std::vector<StackDifference> stack_differences(const StackComparison& compared, const HostStack& host) {
  std::vector<StackDifference> differences;
  for (size_t i = 0; i < compared.reference.size(); ++i) {
    const StackItem& reference = compared.reference[i];
    const std::string* value = known_value(host, reference.item);
    if (value && *value != reference.value) {
      differences.push_back({host.host, reference.item, *value, reference.value, compared.reference_hosts[i]});
    }
  }
  for (const std::string& item : compared.tied) {
    if (const std::string* value = known_value(host, item)) differences.push_back({host.host, item, *value, "", 0});
  }
  return differences;
}

}  // namespace dtrain::events
