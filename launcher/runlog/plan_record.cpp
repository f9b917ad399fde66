#include "launcher/runlog/plan_record.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <unistd.h>

#include <simdjson.h>

#include "launcher/base/fd.h"
#include "launcher/base/plan_change.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/base/json_fields.h"

namespace dtrain {
namespace {

using nlohmann::json;

/// An int field that must be there; `problem` gets the first missing one.
int require_int(const json& object, const char* key, const std::string& where, std::string& problem) {
  std::optional<int64_t> value = json_int(object, key);
  if (!value && problem.empty()) problem = where + "\"" + key + "\" is missing or not an integer";
  return value ? static_cast<int>(*value) : 0;
}

/// An optional array of strings; non-strings are a problem, a missing array is empty.
std::vector<std::string> string_list(const json& object, const char* key, const std::string& where,
                                     std::string& problem) {
  std::vector<std::string> out;
  const json* list = json_member(object, key);
  if (!list || list->is_null()) return out;
  if (!list->is_array()) {
    if (problem.empty()) problem = where + "\"" + key + "\" is not an array";
    return out;
  }
  for (const json& item : *list) {
    if (item.is_string()) out.push_back(item.get<std::string>());
    else if (problem.empty()) problem = where + "\"" + key + "\" holds a non-string";
  }
  return out;
}

bool same_ranks(const std::vector<PlanRecord::Rank>& a, const std::vector<PlanRecord::Rank>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.rank == y.rank && x.dp == y.dp && x.pp == y.pp && x.tp == y.tp;
  });
}

/// The record as a plan change is told (launcher/base/plan_change.h).
PlanShape shape_of(const PlanRecord& plan) {
  PlanShape shape = plan_shape_sizes(plan);
  for (const PlanRecord::Host& host : plan.hosts) {
    PlanShape::Host& out = shape.hosts.emplace_back();
    out.name = host.name;
    for (const PlanRecord::Rank& rank : host.ranks) out.ranks.push_back({rank.rank, rank.tp, rank.pp, rank.dp});
  }
  return shape;
}

}  // namespace

Result<PlanRecord> parse_plan_record(json plan, int generation, const std::string& where) {
  if (!plan.is_object()) return Error::infra(where + ": not a JSON object; not a dtrain plan file");
  std::string problem;
  const std::string at = where + ": ";
  PlanRecord record;
  record.generation = generation;
  record.world_size = require_int(plan, "world_size", at, problem);
  record.data = require_int(plan, "data", at, problem);
  record.pipeline = require_int(plan, "pipeline", at, problem);
  record.tensor = require_int(plan, "tensor", at, problem);
  record.global_batch = require_int(plan, "global_batch", at, problem);
  record.micro_batch = require_int(plan, "micro_batch", at, problem);
  record.grad_accum = require_int(plan, "grad_accum", at, problem);
  record.without = string_list(plan, "without", at, problem);
  record.spares_used = string_list(plan, "spares_used", at, problem);

  // Coordinates come from "ranks"; which host runs which ranks from "hosts".
  std::map<int, PlanRecord::Rank> coordinates;
  const json* ranks = json_member(plan, "ranks");
  if (!ranks || !ranks->is_array()) {
    if (problem.empty()) problem = at + "\"ranks\" is missing or not an array";
  } else {
    for (const json& entry : *ranks) {
      PlanRecord::Rank rank;
      rank.rank = require_int(entry, "rank", at + "ranks[]: ", problem);
      rank.dp = require_int(entry, "dp", at + "ranks[]: ", problem);
      rank.pp = require_int(entry, "pp", at + "ranks[]: ", problem);
      rank.tp = require_int(entry, "tp", at + "ranks[]: ", problem);
      coordinates[rank.rank] = rank;
    }
  }
  const json* hosts = json_member(plan, "hosts");
  if (!hosts || !hosts->is_array()) {
    if (problem.empty()) problem = at + "\"hosts\" is missing or not an array";
  } else {
    for (const json& entry : *hosts) {
      PlanRecord::Host host;
      host.name = json_string(entry, "name");
      host.spare = json_bool(entry, "spare");
      if (host.name.empty() && problem.empty()) problem = at + "hosts[]: \"name\" is missing";
      const json* list = json_member(entry, "ranks");
      if (!list || !list->is_array()) {
        if (problem.empty()) problem = at + "host " + host.name + ": \"ranks\" is missing or not an array";
        continue;
      }
      for (const json& id : *list) {
        auto found = id.is_number_integer() ? coordinates.find(id.get<int>()) : coordinates.end();
        if (found == coordinates.end()) {
          if (problem.empty()) problem = at + "host " + host.name + " lists rank " + json_compact(id) +
                                         ", which \"ranks\" does not describe";
          continue;
        }
        host.ranks.push_back(found->second);
      }
      record.hosts.push_back(std::move(host));
    }
  }
  if (!problem.empty()) return Error::infra(problem);
  record.json = std::move(plan);
  return record;
}

Result<std::string> read_plan_text(const std::string& path) {
  return read_regular_file(path, kMaxPlanFileBytes, FollowLinks::kNo,
                           "a plan written by dtrain is far smaller; this is not a file of the run");
}

namespace {

/// parse_plan_record on simdjson's DOM, for a plan exactly as dtrain writes it: every field there
/// with its type, integers in int range, every host's ranks described. Anything else is nullopt
/// and the generic path decides (and words the error). `dtrain status` reads a 131,072-rank
/// plan (38 MB) so in a fraction of the time nlohmann's DOM takes to build.
std::optional<PlanRecord> read_plain_plan(const std::string& text, int generation) {
  simdjson::dom::parser parser;
  simdjson::dom::object plan;
  if (parser.parse(text).get(plan) != simdjson::SUCCESS) return std::nullopt;
  bool ok = true;
  // A default element has no document behind it: a missing member must never be read.
  auto integer = [&](std::optional<simdjson::dom::element> value) {
    int64_t number = 0;
    if (!value || value->type() != simdjson::dom::element_type::INT64 || value->get(number) != simdjson::SUCCESS ||
        number < std::numeric_limits<int>::min() || number > std::numeric_limits<int>::max()) {
      ok = false;
      return 0;
    }
    return static_cast<int>(number);
  };
  auto field = [&](simdjson::dom::object object, const char* key) -> std::optional<simdjson::dom::element> {
    simdjson::dom::element value;
    if (object.at_key(key).get(value) != simdjson::SUCCESS) {
      ok = false;
      return std::nullopt;
    }
    return value;
  };
  auto strings = [&](const char* key) {
    std::vector<std::string> out;
    simdjson::dom::element value;
    if (plan.at_key(key).get(value) != simdjson::SUCCESS || value.is_null()) return out;
    simdjson::dom::array items;
    if (value.get(items) != simdjson::SUCCESS) {
      ok = false;
      return out;
    }
    for (simdjson::dom::element item : items) {
      std::string_view text_item;
      if (item.get(text_item) != simdjson::SUCCESS) ok = false;
      out.emplace_back(text_item);
    }
    return out;
  };
  PlanRecord record;
  record.generation = generation;
  record.world_size = integer(field(plan, "world_size"));
  record.data = integer(field(plan, "data"));
  record.pipeline = integer(field(plan, "pipeline"));
  record.tensor = integer(field(plan, "tensor"));
  record.global_batch = integer(field(plan, "global_batch"));
  record.micro_batch = integer(field(plan, "micro_batch"));
  record.grad_accum = integer(field(plan, "grad_accum"));
  record.without = strings("without");
  record.spares_used = strings("spares_used");
  if (!ok) return std::nullopt;

  std::unordered_map<int, PlanRecord::Rank> coordinates;
  simdjson::dom::array ranks, hosts;
  std::optional<simdjson::dom::element> ranks_member = field(plan, "ranks"), hosts_member = field(plan, "hosts");
  if (!ranks_member || !hosts_member || ranks_member->get(ranks) != simdjson::SUCCESS ||
      hosts_member->get(hosts) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  coordinates.reserve(ranks.size());
  for (simdjson::dom::element item : ranks) {
    simdjson::dom::object entry;
    if (item.get(entry) != simdjson::SUCCESS) return std::nullopt;
    PlanRecord::Rank rank;
    rank.rank = integer(field(entry, "rank"));
    rank.dp = integer(field(entry, "dp"));
    rank.pp = integer(field(entry, "pp"));
    rank.tp = integer(field(entry, "tp"));
    if (!ok) return std::nullopt;
    coordinates[rank.rank] = rank;  // the last of duplicates, as the generic path's map
  }
  for (simdjson::dom::element item : hosts) {
    simdjson::dom::object entry;
    std::string_view name;
    simdjson::dom::array list;
    if (item.get(entry) != simdjson::SUCCESS) return std::nullopt;
    std::optional<simdjson::dom::element> name_member = field(entry, "name"), list_member = field(entry, "ranks");
    if (!name_member || !list_member || name_member->get(name) != simdjson::SUCCESS || name.empty() ||
        list_member->get(list) != simdjson::SUCCESS) {
      return std::nullopt;
    }
    PlanRecord::Host host;
    host.name = std::string(name);
    simdjson::dom::element spare;
    if (entry.at_key("spare").get(spare) == simdjson::SUCCESS && spare.get(host.spare) != simdjson::SUCCESS) {
      return std::nullopt;
    }
    host.ranks.reserve(list.size());
    for (simdjson::dom::element id : list) {
      auto found = coordinates.find(integer(id));
      if (!ok || found == coordinates.end()) return std::nullopt;
      host.ranks.push_back(found->second);
    }
    record.hosts.push_back(std::move(host));
  }
  return record;
}

}  // namespace

Result<PlanRecord> read_plan_record(const RunDirectory& run, int generation, PlanJson keep) {
  std::string path = run.plan_path(generation);
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
    return Error::infra("no plan-" + std::to_string(generation) + ".json in " + run.path());
  }
  Result<std::string> text = read_plan_text(path);
  if (!text) return text.error();
  return parse_plan_text(*text, generation, path, keep);
}

Result<PlanRecord> parse_plan_text(const std::string& text, int generation, const std::string& where, PlanJson keep) {
  if (keep == PlanJson::drop) {
    if (std::optional<PlanRecord> plain = read_plain_plan(text, generation)) return std::move(*plain);
  }
  json plan = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (plan.is_discarded()) return Error::infra(where + ": not valid JSON; the file is damaged");
  return parse_plan_record(std::move(plan), generation, where);
}

bool same_layout(const PlanRecord& a, const PlanRecord& b) {
  if (a.world_size != b.world_size || a.data != b.data || a.pipeline != b.pipeline || a.tensor != b.tensor ||
      a.global_batch != b.global_batch || a.micro_batch != b.micro_batch || a.grad_accum != b.grad_accum ||
      a.without != b.without || a.spares_used != b.spares_used || a.hosts.size() != b.hosts.size()) {
    return false;
  }
  for (size_t i = 0; i < a.hosts.size(); ++i) {
    if (a.hosts[i].name != b.hosts[i].name || !same_ranks(a.hosts[i].ranks, b.hosts[i].ranks)) return false;
  }
  return true;
}

std::string plan_change_text(const PlanRecord& first, const PlanRecord& current, int since_generation,
                             int replans) {
  if (same_layout(first, current)) return "";
  std::string when = replans > 1 ? "over " + std::to_string(replans) + " re-plans (current since gen " +
                                       std::to_string(since_generation) + ")"
                                 : "at gen " + std::to_string(since_generation);
  PlanChangeText change = describe_plan_change(shape_of(first), shape_of(current));
  std::string head = change.world_changed ? change.size + " " + when : "re-planned " + when + ", " + change.size;
  return change.details.empty() ? head : head + ": " + join(change.details, "; ");
}

std::string plan_history_text(const RunDirectory& run, const PlanRecord& current) {
  // Generation 0 has no history, and reading its plan again was a fifth of `dtrain status` at
  // 131,072 ranks.
  if (current.generation == 0) return "";
  Result<PlanRecord> first = read_plan_record(run, 0, PlanJson::drop);
  if (!first) return "";
  // Walk the generations in order: every layout change is one re-plan; the current layout
  // began at the last change.
  // Without copies: at 16,384 ranks a plan (with its JSON) is megabytes.
  std::optional<PlanRecord> previous_read;
  const PlanRecord* previous = &*first;
  int replans = 0;
  int since = 0;
  for (int generation = 1; generation <= current.generation; ++generation) {
    std::optional<PlanRecord> read;
    if (generation != current.generation) {
      Result<PlanRecord> plan = read_plan_record(run, generation, PlanJson::drop);
      if (!plan) continue;
      read = std::move(*plan);
    }
    const PlanRecord& plan = read ? *read : current;
    if (!same_layout(*previous, plan)) {
      ++replans;
      since = generation;
    }
    if (read) {
      previous_read = std::move(read);
      previous = &*previous_read;
    } else {
      previous = &current;
    }
  }
  return plan_change_text(*first, current, since, replans);
}

}  // namespace dtrain
