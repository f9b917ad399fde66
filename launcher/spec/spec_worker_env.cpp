// The workers' environment of a spec: worker.env, worker.pass_env and worker.env_file, merged
// into WorkerSettings::env. A run directory keeps no secret (man 5 dtrain-spec, SECRETS): its
// spec.yaml names pass_env variables and the env_file (path and names), and a resume reads their
// values again, from dtrain's environment and from the file.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "launcher/base/strings.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_sections.h"

namespace dtrain::spec {
namespace {

constexpr const char* kBadName = " is not an environment variable name; use letters, digits and '_'";

void read_env_map(DiagnosticSink& sink, const Section& worker, std::map<std::string, std::string>& env) {
  const YAML::Node* node = worker.get("env");
  if (node == nullptr) return;
  if (!node->IsMap()) {
    sink.error(*node, worker.path("env"), "expected a mapping of NAME: value, got " + describe(*node));
    return;
  }
  for (auto it = node->begin(); it != node->end(); ++it) {
    YAML::Node name = it->first, value = it->second;
    std::string text = name.IsScalar() ? name.Scalar() : describe(name);
    std::string key = worker.path("env") + "." + text;
    if (!name.IsScalar() || !is_env_name(text)) {
      sink.error(name, key, single_quoted(text) + kBadName);
    } else if (!value.IsScalar()) {
      sink.error(value, key, "expected a string value, got " + describe(value) + "; write \"\" for an empty value");
    } else if (value.Scalar().find('\x7f') != std::string::npos) {
      // Not quoted: the value may be a token.
      sink.error(value, key, "the value holds the control byte 0x7f (DEL); remove it");
    } else if (value.Scalar().find('\0') != std::string::npos) {
      sink.error(value, key, "the value holds a NUL byte (\"\\0\"), which no environment can carry; remove it");
    } else {
      env[text] = value.Scalar();
    }
  }
}

// Values from dtrain's own environment: the way to give workers a secret that no file of the run
// keeps. Read at submit and again at resume, from whoever runs the command.
void read_pass_env(DiagnosticSink& sink, const Section& worker, EnvValues env_values, WorkerSettings& settings) {
  const YAML::Node* node = worker.get("pass_env");
  std::string key = worker.path("pass_env");
  auto names = read_string_list(sink, node, key, true);
  if (!names) return;
  for (const std::string& name : *names) {
    if (!is_env_name(name)) {
      sink.error(*node, key, single_quoted(name) + kBadName);
    } else if (settings.env.count(name) > 0) {
      sink.error(*node, key, name + " is set in worker.env too; keep one (pass_env takes its value from dtrain's environment)");
    } else if (std::find(settings.pass_env.begin(), settings.pass_env.end(), name) == settings.pass_env.end()) {
      settings.pass_env.push_back(name);
    }
  }
  std::sort(settings.pass_env.begin(), settings.pass_env.end());
  if (env_values == EnvValues::names_only) return;
  for (const std::string& name : settings.pass_env) {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) {
      sink.error(*node, key, name + " is not set in dtrain's environment, and no file of the run keeps its value; "
                                    "export " + name + "=... and run the command again");
    } else if (find_invalid_utf8(value) != std::string_view::npos || std::string_view(value).find('\x7f') != std::string_view::npos) {
      sink.error(*node, key, "the value of " + name + " in dtrain's environment is not valid UTF-8 or holds a DEL byte; fix it");
    } else {
      settings.env[name] = value;
    }
  }
}

std::string names_text(const std::vector<std::string>& names) { return names.empty() ? "none" : join(names, ", "); }

std::vector<std::string> minus(const std::vector<std::string>& sorted, const std::vector<std::string>& other) {
  std::vector<std::string> out;
  std::set_difference(sorted.begin(), sorted.end(), other.begin(), other.end(), std::back_inserter(out));
  return out;
}

// The env_file's names recorded with the spec (spec.yaml writes them): a resume says when the
// file defines others now, and, when it is gone, which variables the workers would miss.
std::optional<std::vector<std::string>> recorded_names(DiagnosticSink& sink, const Section& worker, bool has_file) {
  const YAML::Node* node = worker.get("env_file_names");
  auto names = read_string_list(sink, node, worker.path("env_file_names"), false);
  if (!names) return std::nullopt;
  if (!has_file) {
    sink.error(*node, worker.path("env_file_names"), "lists the names of an env_file, and there is none; add env_file or remove this key");
    return std::nullopt;
  }
  std::sort(names->begin(), names->end());
  names->erase(std::unique(names->begin(), names->end()), names->end());
  return names;
}

void read_env_file_values(DiagnosticSink& sink, const Section& worker, const std::string& base_dir,
                          EnvValues env_values, WorkerSettings& settings) {
  const YAML::Node* file_node = worker.get("env_file");
  std::string key = worker.path("env_file");
  auto file = read_string(sink, file_node, key);
  std::optional<std::vector<std::string>> recorded = recorded_names(sink, worker, file.has_value());
  if (!file) return;
  std::string resolved = resolve_path(base_dir, *file);
  std::error_code ignored;
  std::filesystem::path absolute = std::filesystem::absolute(resolved, ignored);
  settings.env_file = absolute.empty() ? resolved : absolute.lexically_normal().string();
  if (env_values == EnvValues::names_only) {
    if (!recorded) return;
    settings.env_file_names = *recorded;
    for (const std::string& name : *recorded) {
      bool elsewhere = settings.env.count(name) > 0 ||
                       std::binary_search(settings.pass_env.begin(), settings.pass_env.end(), name);
      if (!elsewhere) settings.env_from_file.push_back(name);
    }
    return;
  }
  auto text = read_text_file(resolved);
  if (!text) {
    std::string fix = recorded ? "; the run's workers take " + names_text(*recorded) +
                                     " from it, and the run directory keeps only their names: restore the file, "
                                     "or submit the spec again for a new run"
                               : "; the path is relative to the spec file";
    sink.error(*file_node, key, text.error().message + fix);
    return;
  }
  std::vector<LineProblem> problems;
  std::set<std::string> names, from_file;
  for (auto& [name, value] : read_env_file(*text, problems)) {
    names.insert(name);
    // worker.env and pass_env win; a name given twice in the file keeps its first value.
    if (settings.env.emplace(name, value).second) from_file.insert(name);
  }
  for (LineProblem& problem : problems) {
    sink.error_at(resolved, problem.line, problem.column, key, std::move(problem.message));
  }
  settings.env_file_names.assign(names.begin(), names.end());
  settings.env_from_file.assign(from_file.begin(), from_file.end());
  if (recorded && *recorded != settings.env_file_names) {
    sink.warning(*file_node, key,
                 single_quoted(settings.env_file) + " defines other variables than when the run was submitted (new: " +
                     names_text(minus(settings.env_file_names, *recorded)) +
                     "; gone: " + names_text(minus(*recorded, settings.env_file_names)) +
                     "); the workers get the file as it is now");
  }
}

}  // namespace

void read_worker_env(DiagnosticSink& sink, const Section& worker, const std::string& base_dir, EnvValues env_values,
                     WorkerSettings& settings) {
  read_env_map(sink, worker, settings.env);
  read_pass_env(sink, worker, env_values, settings);
  read_env_file_values(sink, worker, base_dir, env_values, settings);
}

}  // namespace dtrain::spec
