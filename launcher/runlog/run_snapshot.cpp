#include "launcher/runlog/run_snapshot.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <string_view>

#include <simdjson.h>

#include "launcher/base/json_fields.h"
#include "launcher/events/event_fields.h"

namespace dtrain {

using nlohmann::json;
// The parts hold events' types (a recovery.completed, failure kinds): read with the events' reader.
using events::detail::EventFields;
using events::detail::put_if;

namespace {

/// An optional value, or null: keys the supervisor always writes.
template <class T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

template <class T>
json list_json(const std::vector<T>& items) {
  json out = json::array();
  for (const T& item : items) out.push_back(item.to_json());
  return out;
}

// ---- the ranks' text (RunSnapshot::text): each field exactly as Rank::to_json() writes it

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest round trip
  out.append(buffer, error == std::errc() ? end : buffer);
}

void append_integer(std::string& out, int64_t value) {
  char buffer[24];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, error == std::errc() ? end : buffer);
}

void append_string(std::string& out, std::string_view value) {
  // Host names and state names are plain ASCII: quoted as they are. Anything else (a quote,
  // a control character, non-ASCII that may be invalid UTF-8) goes through nlohmann's escaping.
  bool plain = true;
  for (unsigned char c : value) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (!plain) {
    out += json(std::string(value)).dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  out += '"';
  out += value;
  out += '"';
}

/// Appends the rows to `out` in place: each copy of a 16,384-rank text (3.5 MB) costs page
/// faults, which are slow on virtual machines (100 ms per snapshot with three copies). The keys
/// are string_view literals, their lengths known when compiled: through strlen at every key the
/// same text took twice as long.
void append_rank_rows(std::string& out, const std::vector<RunSnapshot::Rank>& rows) {
  using namespace std::string_view_literals;
  auto integer_or_null = [&](std::string_view key, const std::optional<int64_t>& value) {
    out += key;
    if (value) append_integer(out, *value);
    else out += "null"sv;
  };
  out += "["sv;
  bool first = true;
  for (const RunSnapshot::Rank& row : rows) {
    out += first ? "\n    {\"rank\": "sv : ",\n    {\"rank\": "sv;
    first = false;
    append_integer(out, row.rank);
    out += ", \"host\": "sv;
    append_string(out, row.host);
    out += ", \"local_rank\": "sv;
    append_integer(out, row.local_rank);
    out += ", \"dp\": "sv;
    append_integer(out, row.dp);
    out += ", \"pp\": "sv;
    append_integer(out, row.pp);
    out += ", \"tp\": "sv;
    append_integer(out, row.tp);
    integer_or_null(", \"pid\": "sv, row.pid);
    out += ", \"state\": "sv;
    append_string(out, row.state);
    integer_or_null(", \"step\": "sv, row.step);
    integer_or_null(", \"last_beat_ms\": "sv, row.last_beat_ms);
    for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
      const std::optional<double>& value = row.metrics.*metric.field;
      if (!value || !std::isfinite(*value) || (metric.shown & contract::kInStateJson) == 0) continue;
      out += ", \""sv;
      out += metric.key;
      out += "\": "sv;
      if (metric.integral) append_integer(out, static_cast<int64_t>(*value));
      else append_number(out, *value);
    }
    out += ", \"exit\": "sv;
    if (!row.exit) {
      out += "null}"sv;
      continue;
    }
    std::string_view separator = "{"sv;
    if (row.exit->code) {
      out += separator;
      out += "\"code\": "sv;
      append_integer(out, *row.exit->code);
      separator = ", "sv;
    }
    if (row.exit->signal) {
      out += separator;
      out += "\"signal\": "sv;
      append_string(out, *row.exit->signal);
    }
    out += row.exit->code || row.exit->signal ? "}}"sv : "{}}"sv;
  }
  out += rows.empty() ? "]"sv : "\n  ]"sv;
}

/// Everything but "ranks".
json head_json(const RunSnapshot& s) {
  json out = {{"version", kRunStateVersion},
              {"run_id", s.run_id},
              {"name", s.name},
              {"tenant", s.tenant.empty() ? json(nullptr) : json(s.tenant)},
              {"state", s.state},
              {"exit_code", or_null(s.exit_code)},
              {"generation", s.generation},
              {"world_size", s.world_size},
              {"restarts", s.restarts},
              {"hosts", list_json(s.hosts)},
              {"excluded_hosts", s.excluded_hosts},
              {"supervisor", s.supervisor ? s.supervisor->to_json() : json(nullptr)},
              {"submitted_at_ms", or_null(s.submitted_at_ms)},
              {"resumed_at_ms", or_null(s.resumed_at_ms)},
              {"finished_at_ms", or_null(s.finished_at_ms)},
              {"updated_at_ms", or_null(s.updated_at_ms)},
              {"last_recovery", s.last_recovery ? s.last_recovery->to_json() : json(nullptr)},
              {"last_checkpoint_step", or_null(s.last_checkpoint_step)},
              {"root_cause", s.root_cause ? s.root_cause->to_json() : json(nullptr)},
              {"stragglers", list_json(s.stragglers)},
              {"goodput", s.goodput},
              {"spec_path", s.spec_path},
              {"detached", s.detached}};
  put_if(out, "total_steps", s.total_steps);
  if (s.hang_timeout) out["hang_timeout"] = s.hang_timeout->to_json();
  if (!s.stack.empty()) out["stack"] = list_json(s.stack);
  if (!s.health.empty()) out["health"] = list_json(s.health);
  if (!s.quarantined.empty()) out["quarantined"] = s.quarantined;
  if (!s.user.empty()) out["user"] = s.user;
  return out;
}

}  // namespace

// ---- the parts

json RunSnapshot::Supervisor::to_json() const {
  json out = {{"pid", pid}, {"hostname", hostname}, {"started_at_ms", started_at_ms}};
  put_if(out, "proc_start_ticks", proc_start_ticks);
  return out;
}

Result<RunSnapshot::Supervisor> RunSnapshot::Supervisor::from_json(const json& object) {
  EventFields fields("", object);
  Supervisor out;
  fields.read("pid", out.pid).read("hostname", out.hostname).read("started_at_ms", out.started_at_ms)
      .read("proc_start_ticks", out.proc_start_ticks);
  return fields.result(std::move(out));
}

json RunSnapshot::Host::to_json() const {
  json out = {{"name", name}, {"state", state}, {"spare", spare}};
  put_if(out, "agent_pid", agent_pid);
  return out;
}

Result<RunSnapshot::Host> RunSnapshot::Host::from_json(const json& object) {
  EventFields fields("", object);
  Host out;
  fields.read("name", out.name).read("state", out.state).read("spare", out.spare).read("agent_pid", out.agent_pid);
  return fields.result(std::move(out));
}

json RunSnapshot::RankExit::to_json() const {
  json out = json::object();
  put_if(out, "code", code);
  put_if(out, "signal", signal);
  return out;
}

Result<RunSnapshot::RankExit> RunSnapshot::RankExit::from_json(const json& object) {
  EventFields fields("", object);
  RankExit out;
  fields.read("code", out.code).read("signal", out.signal);
  return fields.result(std::move(out));
}

json RunSnapshot::Rank::to_json() const {
  json out = {{"rank", rank},
              {"host", host},
              {"local_rank", local_rank},
              {"dp", dp},
              {"pp", pp},
              {"tp", tp},
              {"pid", or_null(pid)},
              {"state", state},
              {"step", or_null(step)},
              {"last_beat_ms", or_null(last_beat_ms)}};
  contract::write_beat_metrics(metrics, out, contract::kInStateJson);
  out["exit"] = exit ? exit->to_json() : json(nullptr);
  return out;
}

Result<RunSnapshot::Rank> RunSnapshot::Rank::from_json(const json& object) {
  EventFields fields("", object);
  Rank out;
  fields.read("rank", out.rank).read("host", out.host).read("local_rank", out.local_rank).read("dp", out.dp)
      .read("pp", out.pp).read("tp", out.tp).read("pid", out.pid).read("state", out.state).read("step", out.step)
      .read("last_beat_ms", out.last_beat_ms);
  for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
    if (metric.shown & contract::kInStateJson) fields.read(metric.key, out.metrics.*metric.field);
  }
  fields.read_nested("exit", out.exit);
  return fields.result(std::move(out));
}

json RunSnapshot::RootCause::to_json() const {
  json out = {{"kind", kind}, {"host", host}, {"message", message}};
  put_if(out, "rank", rank);
  put_if(out, "local_rank", local_rank);
  put_if(out, "log", log);
  put_if(out, "pid", pid);
  put_if(out, "code", code);
  put_if(out, "signal", signal);
  put_if(out, "traceback", traceback);
  return out;
}

Result<RunSnapshot::RootCause> RunSnapshot::RootCause::from_json(const json& object) {
  EventFields fields("", object);
  RootCause out;
  fields.read("kind", out.kind).read("host", out.host).read("message", out.message).read("rank", out.rank)
      .read("local_rank", out.local_rank).read("log", out.log).read("pid", out.pid).read("code", out.code)
      .read("signal", out.signal).read("traceback", out.traceback);
  return fields.result(std::move(out));
}

json RunSnapshot::Straggler::to_json() const {
  return {{"rank", rank}, {"host", host}, {"score", score}, {"median_step_ms", median_step_ms}};
}

Result<RunSnapshot::Straggler> RunSnapshot::Straggler::from_json(const json& object) {
  EventFields fields("", object);
  Straggler out;
  fields.read("rank", out.rank).read("host", out.host).read("score", out.score)
      .read("median_step_ms", out.median_step_ms);
  return fields.result(std::move(out));
}

json RunSnapshot::Recovery::to_json() const {
  json out = completed.to_json();
  out["gen"] = gen;
  return out;
}

Result<RunSnapshot::Recovery> RunSnapshot::Recovery::from_json(const json& object) {
  Result<events::RecoveryCompleted> completed = events::RecoveryCompleted::from_json(object);  // beside "gen"
  if (!completed) return completed.error();
  EventFields fields("", object);
  Recovery out{0, std::move(*completed)};
  fields.read("gen", out.gen);
  return fields.result(std::move(out));
}

// ---- the snapshot

json RunSnapshot::to_json() const {
  json out = head_json(*this);
  out["ranks"] = list_json(ranks);
  return out;
}

std::string RunSnapshot::text() const {
  std::string text = head_json(*this).dump(2, ' ', false, json::error_handler_t::replace);
  // "{\n  ...\n}": "ranks" goes in before the closing brace, into the same buffer.
  text.resize(text.size() - 2);  // "\n}"
  text.reserve(text.size() + ranks.size() * 240 + 32);
  text += ",\n  \"ranks\": ";
  append_rank_rows(text, ranks);
  text += "\n}\n";
  return text;
}

Result<RunSnapshot> RunSnapshot::from_json(const json& state) {
  if (!state.is_object()) return Error::infra("not a JSON object, got " + describe_json_value(state));
  // The version first: a newer dtrain may have changed what the other keys hold.
  const json* version_value = json_member(state, "version");
  if (!version_value || version_value->is_null()) return Error::infra("no \"version\" field; not a dtrain state file");
  std::optional<int64_t> version = json_as_integer(*version_value);
  if (!version) return Error::infra("version: expected an integer, got " + describe_json_value(*version_value));
  if (*version > kRunStateVersion) {
    return Error::user("state format version " + std::to_string(*version) + " is newer than this dtrain reads (" +
                       std::to_string(kRunStateVersion) + "); upgrade dtrain to the version that wrote the run");
  }
  if (*version != kRunStateVersion) {
    return Error::user("state format version " + std::to_string(*version) + " is not one this dtrain reads (" +
                       std::to_string(kRunStateVersion) + "); use the dtrain version that wrote the run");
  }
  EventFields fields("", state);
  RunSnapshot s;
  fields.read("run_id", s.run_id).read("name", s.name).read("tenant", s.tenant).read("user", s.user)
      .read("state", s.state)
      .read("exit_code", s.exit_code).read("generation", s.generation).read("world_size", s.world_size)
      .read("restarts", s.restarts).read("excluded_hosts", s.excluded_hosts)
      .read("submitted_at_ms", s.submitted_at_ms).read("resumed_at_ms", s.resumed_at_ms)
      .read("finished_at_ms", s.finished_at_ms).read("updated_at_ms", s.updated_at_ms)
      .read("last_checkpoint_step", s.last_checkpoint_step).read("goodput", s.goodput)
      .read("total_steps", s.total_steps).read("spec_path", s.spec_path).read("detached", s.detached);
  fields.read_each("hosts", s.hosts);
  fields.read_nested("supervisor", s.supervisor);
  fields.read_each("ranks", s.ranks);
  fields.read_nested("last_recovery", s.last_recovery);
  fields.read_nested("hang_timeout", s.hang_timeout);
  fields.read_each("stack", s.stack);
  fields.read_each("health", s.health);
  fields.read("quarantined", s.quarantined);
  fields.read_nested("root_cause", s.root_cause);
  fields.read_each("stragglers", s.stragglers);
  // dtrain wrote the file: a field of another type means something else changed it.
  Result<RunSnapshot> read = fields.result(std::move(s));
  if (!read) {
    return Error::infra(read.error().message + "; the file is damaged (something other than dtrain changed it)");
  }
  return read;
}

// ---- the plain state.json, on simdjson ---------------------------------------------------------

namespace {

/// One rank of state.json as the writer writes it, into `out` with from_json's meaning: a key
/// absent or null keeps the default, a later duplicate key wins (as nlohmann's parse keeps it).
/// false for anything from_json might read otherwise (or refuse): the generic path decides.
bool read_plain_rank(simdjson::dom::element element, RunSnapshot::Rank& out) {
  using simdjson::dom::element_type;
  simdjson::dom::object object;
  if (element.get(object) != simdjson::SUCCESS) return false;
  auto integer = [](simdjson::dom::element value, int64_t min, int64_t max, std::optional<int64_t>& to) {
    int64_t number = 0;
    if (value.type() == element_type::INT64) {
      if (value.get(number) != simdjson::SUCCESS) return false;
    } else if (value.type() == element_type::UINT64) {
      uint64_t unsigned_number = 0;
      if (value.get(unsigned_number) != simdjson::SUCCESS || unsigned_number > static_cast<uint64_t>(INT64_MAX)) {
        return false;
      }
      number = static_cast<int64_t>(unsigned_number);
    } else {
      return false;
    }
    if (number < min || number > max) return false;
    to = number;
    return true;
  };
  // A null is the default, also after an earlier duplicate of the key (nlohmann keeps the null).
  auto small = [&](simdjson::dom::element value, int& to) {
    if (value.is_null()) {
      to = 0;
      return true;
    }
    std::optional<int64_t> number;
    if (!integer(value, INT_MIN, INT_MAX, number)) return false;
    to = static_cast<int>(*number);
    return true;
  };
  auto large = [&](simdjson::dom::element value, std::optional<int64_t>& to) {
    if (value.is_null()) {
      to.reset();
      return true;
    }
    return integer(value, INT64_MIN, INT64_MAX, to);
  };
  auto text = [](simdjson::dom::element value, std::string& to) {
    if (value.is_null()) {
      to.clear();
      return true;
    }
    std::string_view view;
    if (value.get(view) != simdjson::SUCCESS) return false;
    to.assign(view);
    return true;
  };
  for (simdjson::dom::key_value_pair field : object) {
    std::string_view key = field.key;
    simdjson::dom::element value = field.value;
    bool ok = true;
    if (key == "rank") ok = small(value, out.rank);
    else if (key == "host") ok = text(value, out.host);
    else if (key == "local_rank") ok = small(value, out.local_rank);
    else if (key == "dp") ok = small(value, out.dp);
    else if (key == "pp") ok = small(value, out.pp);
    else if (key == "tp") ok = small(value, out.tp);
    else if (key == "pid") ok = large(value, out.pid);
    else if (key == "state") ok = text(value, out.state);
    else if (key == "step") ok = large(value, out.step);
    else if (key == "last_beat_ms") ok = large(value, out.last_beat_ms);
    else if (key == "exit") {
      if (value.is_null()) {
        out.exit.reset();
        continue;
      }
      simdjson::dom::object exit;
      if (value.get(exit) != simdjson::SUCCESS) return false;
      RunSnapshot::RankExit read;
      for (simdjson::dom::key_value_pair exit_field : exit) {
        if (exit_field.key == "code") {
          std::optional<int64_t> code;
          if (exit_field.value.is_null()) {
            read.code.reset();
          } else if (integer(exit_field.value, INT_MIN, INT_MAX, code)) {
            read.code = static_cast<int>(*code);
          } else {
            return false;
          }
        } else if (exit_field.key == "signal") {
          if (exit_field.value.is_null()) {
            read.signal.reset();
            continue;
          }
          std::string signal;
          if (!text(exit_field.value, signal)) return false;
          read.signal = std::move(signal);
        }
      }
      out.exit = std::move(read);
    } else {
      for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
        if (!(metric.shown & contract::kInStateJson) || key != metric.key) continue;
        std::optional<double>& to = out.metrics.*metric.field;
        if (value.is_null()) {
          to.reset();
          break;
        }
        double number = 0;
        // get_double converts INT64 and UINT64 as nlohmann's get<double>() does.
        if (!value.is_number() || value.get_double().get(number) != simdjson::SUCCESS || !std::isfinite(number)) {
          return false;
        }
        to = number;
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::optional<RunSnapshot> read_plain_state(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::object state;
  if (parser.parse(text.data(), text.size()).get(state) != simdjson::SUCCESS) return std::nullopt;
  // The head (everything but "ranks": kilobytes) through from_json, each member as simdjson
  // writes it back; the ranks here.
  json head = json::object();
  std::optional<simdjson::dom::element> ranks_member;
  for (simdjson::dom::key_value_pair member : state) {
    if (member.key == "ranks") {
      ranks_member = member.value;
      head.erase("ranks");
      continue;
    }
    json value = json::parse(simdjson::minify(member.value), nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) return std::nullopt;
    head[std::string(member.key)] = std::move(value);
  }
  std::vector<RunSnapshot::Rank> ranks;
  if (ranks_member && !ranks_member->is_null()) {
    simdjson::dom::array items;
    if (ranks_member->get(items) != simdjson::SUCCESS) return std::nullopt;
    ranks.resize(items.size());
    size_t i = 0;
    for (simdjson::dom::element item : items) {
      if (!read_plain_rank(item, ranks[i++])) return std::nullopt;
    }
  }
  Result<RunSnapshot> snapshot = RunSnapshot::from_json(head);
  if (!snapshot) return std::nullopt;
  snapshot->ranks = std::move(ranks);
  return std::move(*snapshot);
}

}  // namespace dtrain
