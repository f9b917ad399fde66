#include "launcher/report/run_record.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sys/stat.h>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/metrics/goodput.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::report {
namespace {

using nlohmann::json;

/// Skipped lines of one file named in `problems`: the first few; the rest are only counted.
constexpr int kProblemsPerFile = 3;

/// The field's value when it is a finite number.
std::optional<double> finite_number(const json& object, std::string_view key) {
  std::optional<double> value = json_number(object, key);
  if (value && !std::isfinite(*value)) return std::nullopt;
  return value;
}

std::optional<Spread> parse_spread(const json& object, std::string_view key) {
  const json* member = json_member(object, key);
  if (!member || !member->is_object()) return std::nullopt;
  std::optional<double> min = finite_number(*member, "min"), median = finite_number(*member, "median"),
                        max = finite_number(*member, "max");
  if (!min || !median || !max) return std::nullopt;
  return Spread{*min, *median, *max};
}

std::vector<RankSample> parse_rank_samples(const json* list) {
  std::vector<RankSample> ranks;
  if (!list || !list->is_array()) return ranks;
  for (const json& item : *list) {
    std::optional<int64_t> rank = json_int(item, "rank"), step = json_int(item, "step");
    if (!rank || !step || *rank < 0 || *rank > INT32_MAX) continue;
    RankSample& sample = ranks.emplace_back(RankSample{static_cast<int>(*rank), *step, {}});
    for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
      if (metric.shown & contract::kInMetricsLine) sample.metrics.*metric.field = finite_number(item, metric.key);
    }
  }
  return ranks;
}

/// Every numeric member of `value` under `prefix`, nested objects and arrays named with dots
/// ("gpus.0.util_percent"); at most `budget` of them, and four levels deep.
void collect_numbers(const json& value, const std::string& prefix, int depth, std::map<std::string, double>& out,
                     size_t budget) {
  if (out.size() >= budget || depth > 4) return;
  if (value.is_number()) {
    double number = value.get<double>();
    if (std::isfinite(number) && !prefix.empty()) out[prefix] = number;
    return;
  }
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end() && out.size() < budget; ++it) {
      collect_numbers(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), depth + 1, out, budget);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size() && out.size() < budget; ++i) {
      collect_numbers(value[i], prefix + "." + std::to_string(i), depth + 1, out, budget);
    }
  }
}

/// A host's resource entry: {"host": "gpu01", <numbers or nested objects>}.
std::optional<HostResources> parse_resources(const json& entry, int64_t wall_ms) {
  std::string host = json_string(entry, "host", json_string(entry, "name"));
  if (host.empty() || !entry.is_object()) return std::nullopt;
  HostResources resources{wall_ms, host, {}, false, 0};
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    // Not figures: the agent's clock and the ids of the workers it measured.
    if (it.key() == "host" || it.key() == "name" || it.key() == "ts" || it.key() == "gen" || it.key() == "agent_time_ms") {
      continue;
    }
    collect_numbers(it.value(), it.key(), 1, resources.values, 64);
  }
  if (resources.values.empty()) return std::nullopt;
  return resources;
}

/// A whole file left out of the report: named in its problems and counted.
void note_unreadable(RunRecord& record, std::string message) {
  record.problems.push_back(std::move(message));
  ++record.unreadable_files;
}

/// spec.yaml's intent into `record`, read like every file of the run directory (no link
/// followed, bounded) and then by the spec loader. Host lists and env files it names are not
/// read: only the intent is wanted.
void read_intent(const std::string& dir, RunRecord& record) {
  std::string path = dir + "/spec.yaml";
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT) {  // a run directory of a test, or hand-made
    record.intent_unread = "the run directory has no spec.yaml";
    return;
  }
  Result<std::string> text = read_regular_file(path, kMaxSpecFileBytes, FollowLinks::kNo,
                                               "a job spec is far smaller; its intent is left out of the report");
  if (!text) {
    record.intent_unread = text.error().message;
    note_unreadable(record, record.intent_unread);
    return;
  }
  spec::LoadResult loaded = spec::parse_job_spec(*text, path, dir, {}, spec::EnvValues::names_only);
  if (!loaded.ok()) {
    record.intent_unread = path + " does not load, so its intent is left out: " +
                           (loaded.diagnostics.empty() ? std::string("no reason given") : loaded.diagnostics.front().to_string());
    note_unreadable(record, record.intent_unread);
    return;
  }
  record.intent = loaded.spec->intent;
}

/// Reads `path` line by line into `record`; a missing file is fine (a run before its first
/// metrics line, or one that never rotated). One that cannot be read (a link, a FIFO, too large)
/// is named in `problems` and left out.
void read_metrics_file(const std::string& path, const std::string& shown_name, RunRecord& record) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT) return;
  Result<std::string> text = read_regular_file(path, kMaxMetricsFileBytes, FollowLinks::kNo,
                                               "dtrain rotates metrics.jsonl at 64 MiB; left out of the report");
  if (!text) {
    note_unreadable(record, text.error().message);
    return;
  }
  int64_t number = 0;
  int shown = 0;
  for (size_t start = 0; start < text->size();) {
    size_t newline = text->find('\n', start);
    size_t end = newline == std::string::npos ? text->size() : newline;
    std::string_view line(text->data() + start, end - start);
    start = end + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<MetricsLine> parsed = parse_metrics_line(line);
    if (!parsed) {
      // The final line of a live file may be mid-write: not worth a warning, but still counted.
      ++record.skipped_metrics_lines;
      if (shown++ < kProblemsPerFile) {
        record.problems.push_back(shown_name + ":" + std::to_string(number) + ": skipped (" +
                                  parsed.error().message + ")");
      }
      continue;
    }
    if (parsed->training) record.training.push_back(std::move(*parsed->training));
    for (HostResources& resources : parsed->resources) record.resources.push_back(std::move(resources));
  }
}

/// events.jsonl is read whole into memory (as JSON): refuse what is not a regular file of the run
/// or is larger than kMaxEventsFileBytes before reading a byte. Missing: read_events says so.
Status check_events_file(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT) return {};
  Result<UniqueFd> fd = open_regular_file(path, FollowLinks::kNo);
  if (!fd) return fd.error();
  if (::fstat(fd->get(), &info) == 0 && static_cast<uint64_t>(info.st_size) > kMaxEventsFileBytes) {
    return Error::user("'" + printable(path) + "' is " + describe_bytes(static_cast<uint64_t>(info.st_size)) +
                       ", over the " + describe_bytes(kMaxEventsFileBytes) +
                       " that dtrain report reads; see the run with dtrain status, or filter events.jsonl with jq");
  }
  return {};
}

}  // namespace

Result<MetricsLine> parse_metrics_line(std::string_view line) {
  json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return Error::infra("not valid JSON");
  if (!object.is_object()) return Error::infra("not a JSON object");
  std::optional<int64_t> wall_ms = event_wall_ms(object);
  if (!wall_ms) return Error::infra("\"ts\" is missing or not a timestamp");
  MetricsLine parsed;

  // Training: per-rank lines ("ranks") or summaries ("ranks_reporting", spreads, "outliers").
  const json* ranks = json_member(object, "ranks");
  std::optional<int64_t> reporting = json_int(object, "ranks_reporting");
  if ((ranks && ranks->is_array()) || reporting) {
    TrainingSample sample;
    sample.wall_ms = *wall_ms;
    std::optional<int64_t> generation = json_int(object, "gen");
    sample.generation = generation && *generation >= 0 && *generation < INT32_MAX ? static_cast<int>(*generation) : 0;
    if (reporting) {
      sample.summary = true;
      sample.ranks_reporting = *reporting;
      sample.step = parse_spread(object, "step");
      for (size_t i = 0; i < contract::kBeatMetrics.size(); ++i) {
        const contract::BeatMetric& metric = contract::kBeatMetrics[i];
        if (metric.shown & contract::kInMetricsLine) sample.spreads[i] = parse_spread(object, metric.key);
      }
      sample.ranks = parse_rank_samples(json_member(object, "outliers"));
    } else {
      sample.ranks = parse_rank_samples(ranks);
      sample.ranks_reporting = static_cast<int64_t>(sample.ranks.size());
    }
    parsed.training = std::move(sample);
  }

  // Resources: {"hosts": [{"host": ..., ...}]}, a line about one {"host": ..., ...}, or past 64
  // hosts spreads over all of them {"hosts_reporting": N, "host_cpu_percent": {min, median, max}}.
  if (std::optional<int64_t> hosts_reporting = json_int(object, "hosts_reporting")) {
    HostResources summary{*wall_ms, "", {}, true, *hosts_reporting};
    for (auto it = object.begin(); it != object.end() && summary.values.size() + 3 <= 64; ++it) {
      if (std::optional<Spread> spread = parse_spread(object, it.key())) {
        summary.values[it.key() + ".min"] = spread->min;
        summary.values[it.key() + ".median"] = spread->median;
        summary.values[it.key() + ".max"] = spread->max;
      }
    }
    if (!summary.values.empty()) parsed.resources.push_back(std::move(summary));
  } else if (const json* hosts = json_member(object, "hosts"); hosts && hosts->is_array()) {
    for (const json& entry : *hosts) {
      if (std::optional<HostResources> resources = parse_resources(entry, *wall_ms)) {
        parsed.resources.push_back(std::move(*resources));
      }
    }
  } else if (!parsed.training && json_member(object, "host")) {
    if (std::optional<HostResources> resources = parse_resources(object, *wall_ms)) {
      parsed.resources.push_back(std::move(*resources));
    }
  }
  return parsed;
}

Result<HostFacts> parse_host_facts(std::string_view text, const std::string& fallback_name) {
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return Error::infra("not valid JSON");
  if (!object.is_object()) return Error::infra("not a JSON object");
  HostFacts host;
  host.name = json_string(object, "host", fallback_name);
  host.version = json_string(object, "version");
  const json* facts = json_member(object, "facts");
  if (!facts || !facts->is_object()) facts = &object;  // facts at the top level
  host.hostname = json_string(*facts, "hostname");
  host.cpus = json_int(*facts, "cpus").value_or(0);
  host.memory_mb = json_int(*facts, "memory_mb").value_or(0);
  host.topology = json_string(*facts, "topology");
  if (const json* gpus = json_member(*facts, "gpus"); gpus && gpus->is_array()) {
    for (const json& gpu : *gpus) {
      if (!gpu.is_object()) continue;
      host.gpus.push_back({json_int(gpu, "index").value_or(static_cast<int64_t>(host.gpus.size())),
                           json_string(gpu, "name"), json_string(gpu, "uuid")});
    }
  }
  return host;
}

void read_metrics_files(const std::string& dir, RunRecord& record) {
  read_metrics_file(dir + "/metrics.1.jsonl", "metrics.1.jsonl", record);
  read_metrics_file(dir + "/metrics.jsonl", "metrics.jsonl", record);
  if (record.skipped_metrics_lines > kProblemsPerFile) {
    record.problems.push_back(std::to_string(record.skipped_metrics_lines) + " metrics lines skipped in all");
  }
}

std::optional<double> median_step_ms(const std::vector<TrainingSample>& training, std::optional<int> generation) {
  std::vector<double> values;
  for (const TrainingSample& sample : training) {
    if (generation && sample.generation != *generation) continue;
    if (sample.summary) {
      if (const std::optional<Spread>& spread = sample.spread(&contract::BeatMetrics::step_ms)) values.push_back(spread->median);
      continue;
    }
    for (const RankSample& rank : sample.ranks) {
      if (rank.metrics.step_ms && std::isfinite(*rank.metrics.step_ms) && *rank.metrics.step_ms > 0) {
        values.push_back(*rank.metrics.step_ms);
      }
    }
  }
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

Result<RunRecord> load_run_record(const std::string& dir) {
  namespace fs = std::filesystem;
  RunRecord record;
  std::error_code absolute_error;
  record.dir = fs::absolute(dir, absolute_error).lexically_normal().string();
  if (record.dir.size() > 1 && record.dir.back() == '/') record.dir.pop_back();
  record.run_id = fs::path(record.dir).filename().string();

  // The events are the report: without them there is nothing to render, so a file that cannot
  // be read (a link, a FIFO, over kMaxEventsFileBytes) fails the report with its reason.
  if (Status readable = check_events_file(dir + "/events.jsonl"); !readable) return readable.error();
  int shown = 0;
  Result<std::vector<LoggedEvent>> events = read_logged_events(dir + "/events.jsonl", [&](const EventLineError& line) {
    ++record.skipped_event_lines;
    if (shown++ < kProblemsPerFile) record.problems.push_back(line.message());
  });
  if (!events) return Error::user(dir + " is not a dtrain run directory: " + events.error().message);
  record.events = std::move(*events);

  if (Result<RunSnapshot> state = read_state_file(dir + "/state.json")) {
    record.state = std::move(*state);
  } else {
    record.problems.push_back(state.error().message);
  }

  std::error_code error;
  std::vector<fs::path> plan_files, host_files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("plan-", 0) == 0 && name.size() > 10 && name.compare(name.size() - 5, 5, ".json") == 0) {
      plan_files.push_back(entry.path());
    }
  }
  // hosts/ is a directory dtrain made: a link there would lead the report to files elsewhere.
  if (fs::is_symlink(fs::symlink_status(dir + "/hosts", error))) {
    note_unreadable(record, "'" + printable(dir + "/hosts") +
                                "' is a symbolic link, and dtrain follows none inside a run directory; host facts left out");
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir + "/hosts", error)) {
      if (entry.path().extension() == ".json") host_files.push_back(entry.path());
    }
  }
  // Natural order: gpu2 before gpu10, as people number their hosts.
  std::sort(host_files.begin(), host_files.end(), [](const fs::path& a, const fs::path& b) {
    std::string x = a.stem().string(), y = b.stem().string();
    size_t i = 0, j = 0;
    while (i < x.size() && j < y.size()) {
      if (std::isdigit(static_cast<unsigned char>(x[i])) && std::isdigit(static_cast<unsigned char>(y[j]))) {
        size_t i_end = x.find_first_not_of("0123456789", i), j_end = y.find_first_not_of("0123456789", j);
        std::string_view u = std::string_view(x).substr(i, i_end == std::string::npos ? std::string::npos : i_end - i);
        std::string_view v = std::string_view(y).substr(j, j_end == std::string::npos ? std::string::npos : j_end - j);
        u.remove_prefix(std::min(u.find_first_not_of('0'), u.size()));
        v.remove_prefix(std::min(v.find_first_not_of('0'), v.size()));
        if (u.size() != v.size()) return u.size() < v.size();
        if (u != v) return u < v;
        i = i_end == std::string::npos ? x.size() : i_end;
        j = j_end == std::string::npos ? y.size() : j_end;
        continue;
      }
      if (x[i] != y[j]) return x[i] < y[j];
      ++i;
      ++j;
    }
    return x.size() - i < y.size() - j;
  });

  for (const fs::path& path : plan_files) {
    std::string digits = path.filename().string().substr(5);
    digits.resize(digits.size() - 5);
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    int generation = std::stoi(digits);
    Result<std::string> text = read_plan_text(path.string());
    json plan = text ? json::parse(*text, nullptr, false) : json();
    Result<PlanRecord> parsed = text ? parse_plan_record(plan, generation, path.string())
                                     : Result<PlanRecord>(text.error());
    if (parsed) record.plans.emplace(generation, std::move(*parsed));
    else note_unreadable(record, parsed.error().message);
  }
  for (const fs::path& path : host_files) {
    Result<std::string> text = read_regular_file(path.string(), kMaxHostFactsBytes, FollowLinks::kNo,
                                                 "a host's facts are a few kB; left out of the report");
    if (!text) {
      note_unreadable(record, text.error().message);
      continue;
    }
    Result<HostFacts> host = parse_host_facts(*text, path.stem().string());
    if (host) record.hosts.push_back(std::move(*host));
    else note_unreadable(record, path.string() + ": " + host.error().message);
  }

  read_intent(dir, record);
  read_metrics_files(dir, record);
  if (record.skipped_event_lines > kProblemsPerFile) {
    record.problems.push_back(std::to_string(record.skipped_event_lines) + " event lines skipped in all");
  }
  return record;
}

}  // namespace dtrain::report
