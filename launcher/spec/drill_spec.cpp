// drill.yaml → DrillSpec, with the same file:line:col diagnostics as job specs.

#include "launcher/spec/drill_spec.h"

#include <algorithm>
#include <exception>
#include <filesystem>

#include "launcher/base/strings.h"
#include "launcher/spec/spec_reader.h"

namespace dtrain::spec {

const std::vector<std::string>& drill_fault_kinds() {
  static const std::vector<std::string> kinds = {"kill-rank", "hang-rank", "corrupt-checkpoint", "slow-storage",
                                                 "kill-host", "partition-host", "kill-supervisor"};
  return kinds;
}

std::string DrillSpecResult::message() const {
  std::string text;
  for (const Diagnostic& diagnostic : diagnostics) {
    if (!text.empty()) text += "\n";
    text += diagnostic.to_string();
  }
  return text;
}

namespace {

const std::vector<std::string> kObjectiveKeys = {"detect", "recover", "max_lost_steps"};

void read_objectives(DiagnosticSink& sink, const Section& section, DrillObjectives& out) {
  out.detect = read_duration(sink, section.get("detect"), section.path("detect"), Millis(1));
  out.recover = read_duration(sink, section.get("recover"), section.path("recover"), Millis(1));
  if (auto lost = read_int(sink, section.get("max_lost_steps"), section.path("max_lost_steps"), 0)) {
    out.max_lost_steps = *lost;
  }
}

std::string place(const DiagnosticSink& sink, const YAML::Node& node, const std::string& key) {
  Diagnostic where = sink.locate(node, key);
  return where.line > 0 ? where.file + ":" + std::to_string(where.line) + ":" + std::to_string(where.column)
                        : where.file;
}

// partition-host must say how to cut: the user's commands, or the firewall, which is opt-in
// because it changes the host's rules (see dtrain-drill(1)).
void read_partition(DiagnosticSink& sink, const YAML::Node& entry_node, const std::string& key, const Section& entry,
                    DrillFaultEntry& fault) {
  const YAML::Node* node = entry.get("partition");
  if (fault.fault != "partition-host") {
    if (node) sink.error(*node, entry.path("partition"), "only partition-host takes `partition`; remove it");
    return;
  }
  if (!node) {
    sink.error(entry_node, key + ".partition",
               "missing; partition-host needs a way to cut the host off: partition: {cut: \"CMD {host}\", heal: "
               "\"CMD {host}\"}, or opt in to firewall rules on the host with partition: {method: firewall}");
    return;
  }
  Section section(sink, node, entry.path("partition"), {"method", "cut", "heal", "duration"});
  if (!section.node()) return;
  DrillPartition partition;
  std::optional<std::string> method = read_string(sink, section.get("method"), section.path("method"));
  partition.cut = read_string(sink, section.get("cut"), section.path("cut")).value_or("");
  partition.heal = read_string(sink, section.get("heal"), section.path("heal")).value_or("");
  partition.duration = read_duration(sink, section.get("duration"), section.path("duration"), Millis(1000));
  bool has_commands = !partition.cut.empty() || !partition.heal.empty();
  partition.method = method.value_or(has_commands ? "commands" : "");
  if (partition.method != "commands" && partition.method != "firewall") {
    sink.error(section.get("method") ? *section.get("method") : *node, section.path("method"),
               partition.method.empty()
                   ? std::string("no way to cut the host given; write cut: and heal: commands, or method: firewall")
                   : single_quoted(partition.method) + " is not a partition method; use commands (with cut: and "
                                                       "heal:) or firewall");
    return;
  }
  if (partition.method == "firewall" && has_commands) {
    sink.error(*node, entry.path("partition"), "method: firewall takes no cut/heal commands; keep one of the two");
    return;
  }
  if (partition.method == "commands" && (partition.cut.empty() || partition.heal.empty())) {
    sink.error(*node, entry.path("partition"),
               std::string("give both cut: and heal: (") + (partition.cut.empty() ? "cut" : "heal") +
                   " is missing): a drill never leaves a host cut off");
    return;
  }
  fault.partition = partition;
}

// `fault: kill-rank:1` is the command line's spelling; `fault: kill-rank` + `target: 1` the
// long one. Both are accepted, not both at once.
void read_fault(DiagnosticSink& sink, const YAML::Node& node, const std::string& key, DrillSpec& spec) {
  Section entry(sink, &node, key, {"fault", "target", "at_step", "delay", "partition"});
  if (!entry.node()) return;
  DrillFaultEntry fault;
  fault.where = place(sink, node, key);
  const YAML::Node* kind_node = entry.get("fault");
  if (!kind_node) {
    sink.error(node, key + ".fault", "missing; name the fault: " + join(drill_fault_kinds(), ", "));
    return;
  }
  std::optional<std::string> text = read_string(sink, kind_node, entry.path("fault"));
  if (!text) return;
  std::string kind = *text;
  if (size_t colon = kind.find(':'); colon != std::string::npos) {
    fault.target = kind.substr(colon + 1);
    kind = kind.substr(0, colon);
  }
  const auto& kinds = drill_fault_kinds();
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    std::string hint = suggest(kind, kinds);
    sink.error(*kind_node, entry.path("fault"),
               single_quoted(kind) + " is not a fault kind; use one of " + join(kinds, ", ") +
                   (hint.empty() ? "" : "; did you mean " + single_quoted(hint) + "?"));
    return;
  }
  fault.fault = kind;
  if (std::optional<std::string> target = read_string(sink, entry.get("target"), entry.path("target"))) {
    if (!fault.target.empty()) {
      sink.error(*entry.get("target"), entry.path("target"),
                 "the target is given twice (" + single_quoted(fault.target) + " in `fault` and " +
                     single_quoted(*target) + " here); keep one");
      return;
    }
    fault.target = *target;
  }
  if (auto step = read_int(sink, entry.get("at_step"), entry.path("at_step"), 0)) fault.at_step = *step;
  fault.delay = read_duration(sink, entry.get("delay"), entry.path("delay"), Millis(1));
  if (fault.delay && kind != "slow-storage") {
    sink.error(*entry.get("delay"), entry.path("delay"), "only slow-storage takes a delay; remove it");
  }
  read_partition(sink, node, key, entry, fault);
  spec.faults.push_back(std::move(fault));
}

void read_sets(DiagnosticSink& sink, const YAML::Node* node, DrillSpec& spec) {
  if (!node) return;
  if (!node->IsMap()) {
    sink.error(*node, "set", "expected a mapping of dotted spec keys to values, e.g. set: {elastic.max_restarts: 3}, got " +
                                 describe(*node));
    return;
  }
  for (auto it = node->begin(); it != node->end(); ++it) {
    std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    if (key.empty()) {
      sink.error(it->first, "set", "a key of `set` must be a dotted spec key such as heartbeat.timeout");
      continue;
    }
    // The value travels as YAML text, the way `--set key=value` carries it.
    YAML::Emitter emitter;
    emitter << YAML::Flow << it->second;
    spec.sets.push_back({key, it->second.IsScalar() ? it->second.Scalar() : std::string(emitter.c_str())});
  }
}

void read_job(DiagnosticSink& sink, const YAML::Node* node, const std::string& base_dir, DrillSpec& spec) {
  if (!node) {
    sink.error_at(sink.file(), 1, 1, "job", "missing; give a job spec path (job: ../quickstart.yaml) or the job inline");
    return;
  }
  if (node->IsScalar()) {
    spec.job_path = resolve_path(base_dir, node->Scalar());
    if (!std::filesystem::is_regular_file(spec.job_path)) {
      sink.error(*node, "job", single_quoted(node->Scalar()) + " is not a file (looked at " +
                                   single_quoted(spec.job_path) + "); give the path of a job spec, relative to the drill spec");
    }
    return;
  }
  if (!node->IsMap()) {
    sink.error(*node, "job", "expected a job spec path or an inline job spec mapping, got " + describe(*node));
    return;
  }
  YAML::Emitter emitter;
  emitter << *node;
  spec.inline_job_yaml = emitter.c_str();
}

YAML::Node load_root(DiagnosticSink& sink, const std::string& text, const std::string& source_name) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsDefined() || root.IsNull() || !root.IsMap()) {
      sink.error_at(source_name, 1, 1, "", "expected a mapping with version: 1, job, faults and objectives");
      return {};
    }
    return root;
  } catch (const YAML::ParserException& error) {
    int line = error.mark.is_null() ? 0 : error.mark.line + 1;
    int column = error.mark.is_null() ? 0 : error.mark.column + 1;
    sink.error_at(source_name, line, column, "", "YAML syntax error: " + error.msg +
                                                     "; check the indentation and the ':' after each key");
    return {};
  }
}

}  // namespace

DrillSpecResult parse_drill_spec(const std::string& yaml_text, const std::string& source_name,
                                 const std::string& base_dir) {
  DiagnosticSink sink(source_name, {});
  DrillSpecResult result;
  try {
    YAML::Node root = load_root(sink, yaml_text, source_name);
    if (!sink.empty()) {
      result.diagnostics = sink.take();
      return result;
    }
    const YAML::Node& const_root = root;
    Section top(sink, &const_root, "", {"version", "job", "set", "timeout", "faults", "objectives"});
    const YAML::Node* version = top.get("version");
    if (!version) {
      sink.error_at(source_name, 1, 1, "version", "the drill spec has no version; add `version: 1` as its first line");
    } else if (!version->IsScalar() || version->Scalar() != "1") {
      sink.error(*version, "version", describe(*version) + " is not a drill spec version this dtrain reads; write `version: 1`");
    }
    DrillSpec spec;
    spec.source_path = source_name;
    read_job(sink, top.get("job"), base_dir, spec);
    read_sets(sink, top.get("set"), spec);
    if (auto timeout = read_duration(sink, top.get("timeout"), "timeout", Millis(1000))) spec.timeout = *timeout;
    const YAML::Node* faults = top.get("faults");
    if (!faults || !faults->IsSequence() || faults->size() == 0) {
      if (faults) {
        sink.error(*faults, "faults", "expected a list of faults, got " + describe(*faults));
      } else {
        sink.error_at(source_name, 1, 1, "faults", "missing; list at least one: faults: [{fault: kill-rank, target: 1}]");
      }
    } else {
      for (size_t i = 0; i < faults->size(); ++i) {
        read_fault(sink, (*faults)[i], "faults[" + std::to_string(i) + "]", spec);
      }
    }
    Section objectives(sink, top.get("objectives"), "objectives", kObjectiveKeys);
    read_objectives(sink, objectives, spec.objectives);
    if (sink.empty()) result.spec = std::move(spec);
  } catch (const std::exception& error) {
    sink.error_at(source_name, 0, 0, "", std::string("internal bug: unexpected error while reading the drill spec: ") + error.what());
  }
  result.diagnostics = sink.take();
  return result;
}

DrillSpecResult load_drill_spec(const std::string& path) {
  Result<std::string> text = read_text_file(path);
  if (!text) {
    DrillSpecResult result;
    result.diagnostics.push_back({path, 0, 0, "", text.error().message + "; give the path of a drill spec (YAML)"});
    return result;
  }
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  return parse_drill_spec(*text, path, base_dir.empty() ? "." : base_dir);
}

Result<DrillObjectives> load_drill_objectives(const std::string& path) {
  Result<std::string> text = read_text_file(path);
  if (!text) return Error::user(text.error().message + "; give the path of an objectives file (YAML)");
  DiagnosticSink sink(path, {});
  DrillObjectives objectives;
  try {
    YAML::Node root = load_root(sink, *text, path);
    if (sink.empty()) {
      const YAML::Node& const_root = root;
      bool nested = const_root["objectives"].IsDefined();
      YAML::Node node = nested ? YAML::Node(const_root["objectives"]) : root;
      // In a whole drill.yaml the other top-level keys are not ours to judge.
      Section section(sink, &node, nested ? "objectives" : "", kObjectiveKeys);
      read_objectives(sink, section, objectives);
      if (sink.empty() && !objectives.detect && !objectives.recover && !objectives.max_lost_steps) {
        sink.error_at(path, 1, 1, "", "no objectives found; write detect: 10s, recover: 60s and/or max_lost_steps: 100");
      }
    }
  } catch (const std::exception& error) {
    sink.error_at(path, 0, 0, "", std::string("internal bug: unexpected error while reading objectives: ") + error.what());
  }
  if (!sink.empty()) {
    std::string message;
    for (const Diagnostic& diagnostic : sink.take()) {
      message += (message.empty() ? "" : "\n") + diagnostic.to_string();
    }
    return Error::user(message);
  }
  return objectives;
}

}  // namespace dtrain::spec
