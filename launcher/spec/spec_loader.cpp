// Entry points of the spec loader: YAML text → tree, overrides, version, then the sections.

#include "launcher/spec/spec_loader.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>

#include "launcher/base/secrets.h"
#include "launcher/base/strings.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_reader.h"
#include "launcher/spec/spec_sections.h"

namespace dtrain::spec {

std::string Diagnostic::to_string() const {
  std::string text = file;
  if (line > 0) text += ":" + std::to_string(line) + ":" + std::to_string(column);
  text += ": ";
  if (!key.empty()) text += key + ": ";
  return text + message;
}

std::string LoadResult::message() const {
  std::string text;
  for (const Diagnostic& diagnostic : diagnostics) {
    if (!text.empty()) text += "\n";
    text += diagnostic.to_string();
  }
  return text;
}

Result<Override> parse_override(std::string_view text) {
  size_t equals = text.find('=');
  if (equals == std::string_view::npos) {
    return Error::user("--set " + single_quoted(text) + " has no '='; write --set key=value, e.g. --set elastic.max_restarts=3");
  }
  std::string key(trim(text.substr(0, equals)));
  if (key.empty()) return Error::user("--set " + single_quoted(text) + " has no key before '='; write --set key=value");
  for (const std::string& part : split(key, '.')) {
    if (part.empty()) return Error::user("--set " + single_quoted(text) + ": " + single_quoted(key) + " has an empty part; write a dotted path such as heartbeat.timeout");
  }
  return Override{key, std::string(text.substr(equals + 1))};
}

namespace {

// Sets each override in the tree (creating sections as needed) so that it is validated exactly
// like the file; a value is read as YAML, so "auto", "3" and "[a, b]" mean what they would there.
void apply_overrides(DiagnosticSink& sink, YAML::Node& root, const std::vector<Override>& overrides) {
  for (const Override& override_ : overrides) {
    YAML::Node value;
    try {
      value = override_.value.empty() ? YAML::Node(std::string()) : YAML::Load(override_.value);
    } catch (const YAML::Exception& error) {
      // A worker variable's value is never repeated: it may be a token.
      bool hidden = looks_secret(override_.key) || starts_with(override_.key, "worker.env.");
      sink.error_at("--set", 0, 0, override_.key,
                    (hidden ? std::string("the value") : single_quoted(override_.value)) + " is not a valid YAML value (" +
                        error.msg + "); quote it: --set '" + override_.key + "=\"...\"'");
      continue;
    }
    std::vector<std::string> parts = split(override_.key, '.');
    YAML::Node current;
    current.reset(root);
    bool ok = true;
    std::string walked;
    for (size_t i = 0; i + 1 < parts.size() && ok; ++i) {
      walked += (walked.empty() ? "" : ".") + parts[i];
      YAML::Node next = current[parts[i]];
      if (!next.IsDefined() || next.IsNull()) {
        current[parts[i]] = YAML::Node(YAML::NodeType::Map);
        next.reset(current[parts[i]]);
      } else if (!next.IsMap()) {
        sink.error_at("--set", 0, 0, override_.key,
                      single_quoted(walked) + " is " + describe(next) + ", not a section; set it whole: --set " + walked + "=...");
        ok = false;
      }
      current.reset(next);
    }
    if (ok) current[parts.back()] = value;
  }
}

// The first byte YAML does not allow in a stream: invalid UTF-8, or a C0 control character
// other than tab and line breaks, or DEL. npos when there is none.
size_t find_unfit_byte(std::string_view text) {
  size_t control = std::find_if(text.begin(), text.end(), [](char c) {
                     auto byte = static_cast<unsigned char>(c);
                     return (byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7f;
                   }) - text.begin();
  size_t invalid = find_invalid_utf8(text);
  size_t first = std::min(control, invalid);
  return first < text.size() ? first : std::string_view::npos;
}

std::string hex_byte(char c) {
  static const char* hex = "0123456789abcdef";
  auto byte = static_cast<unsigned char>(c);
  return std::string("0x") + hex[byte >> 4] + hex[byte & 15];
}

// The usual trap: a hostlist inside a YAML flow list ("hosts: [gpu[01-04]]"), where '[' opens a
// nested list. Say so instead of leaving the user with the parser's words.
std::string syntax_hint(const std::string& text, int line) {
  std::vector<std::string> lines = split(text, '\n');
  if (line >= 1 && line <= static_cast<int>(lines.size())) {
    const std::string& bad = lines[line - 1];
    for (size_t i = 1; i < bad.size(); ++i) {
      if (bad[i] == '[' && std::isalnum(static_cast<unsigned char>(bad[i - 1]))) {
        return "a hostlist inside [ ] must be quoted, [\"gpu[01-04]\"], or written as a block list item: - gpu[01-04]";
      }
    }
  }
  return "check the indentation, the ':' after each key and closing brackets";
}

}  // namespace

LoadResult parse_job_spec(const std::string& yaml_text, const std::string& source_name,
                          const std::string& base_dir, const std::vector<Override>& overrides,
                          EnvValues env_values) {
  std::vector<std::string> override_keys;
  for (const Override& override_ : overrides) override_keys.push_back(override_.key);
  DiagnosticSink sink(source_name, override_keys);
  LoadResult result;
  std::vector<std::string> secrets;
  // YAML is UTF-8 without raw control characters, and the resolved spec a run keeps is written
  // as such: yaml-cpp reads other bytes leniently, and they would come back changed on resume (a
  // different argv or env). Refuse them here, where the user can fix them.
  if (size_t bad = find_unfit_byte(yaml_text); bad != std::string::npos) {
    std::string before = yaml_text.substr(0, bad);
    size_t line_start = before.rfind('\n') == std::string::npos ? 0 : before.rfind('\n') + 1;
    int line = static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1;
    int column = static_cast<int>(bad - line_start) + 1;
    bool control = static_cast<unsigned char>(yaml_text[bad]) < 0x20 || yaml_text[bad] == 0x7f;
    sink.error_at(source_name, line, column, "",
                  "byte " + hex_byte(yaml_text[bad]) +
                      (control ? " is a control character, which YAML does not allow raw; write it escaped in a "
                                 "double-quoted string, \"\\x" + hex_byte(yaml_text[bad]).substr(2) + "\""
                               : " is not valid UTF-8; save the spec as UTF-8"));
  }
  for (const Override& override_ : overrides) {
    if (size_t bad = find_invalid_utf8(override_.value); bad != std::string::npos) {
      sink.error_at("--set", 0, 0, override_.key, "byte " + hex_byte(override_.value[bad]) + " in the value is not valid UTF-8");
    }
  }
  if (!sink.empty()) {
    result.diagnostics = sink.take();
    return result;
  }
  try {
    YAML::Node root;
    try {
      root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& error) {
      int line = error.mark.is_null() ? 0 : error.mark.line + 1;
      int column = error.mark.is_null() ? 0 : error.mark.column + 1;
      sink.error_at(source_name, line, column, "", "YAML syntax error: " + error.msg + "; " + syntax_hint(yaml_text, line));
      result.diagnostics = sink.take();
      return result;
    }
    if (!root.IsDefined() || root.IsNull()) {
      sink.error_at(source_name, 0, 0, "", "the spec is empty; start it with:\n  version: 1\n  worker:\n    command: [python3, train.py]");
    } else if (!root.IsMap()) {
      sink.error(root, "", "the top level must be a mapping of keys (version: 1, hosts: [...], worker: {...}), got " +
                               describe(root));
    }
    if (!sink.empty()) {
      result.diagnostics = sink.take();
      return result;
    }
    apply_overrides(sink, root, overrides);
    refuse_passwords(sink, root);

    const YAML::Node& const_root = root;  // const lookups never insert keys
    YAML::Node version = const_root["version"];
    if (!version.IsDefined() || version.IsNull()) {
      sink.error_at(source_name, 1, 1, "version", "the spec has no version; add `version: 1` as its first line");
    } else if (!version.IsScalar() || version.Scalar() != "1") {
      // Other keys may mean something else in another version: say only this.
      sink.error(version, "version", describe(version) + " is not a spec version this dtrain reads; write `version: 1`");
      result.diagnostics = sink.take();
      return result;
    }
    JobSpec spec;
    spec.source_path = source_name;
    read_spec_body(sink, root, base_dir, spec, env_values);
    secrets = spec.worker.secret_values();
    if (sink.empty()) result.spec = std::move(spec);
  } catch (const std::exception& error) {
    // yaml-cpp throws on a few exotic inputs (bad conversions, aliases); never let them escape.
    sink.error_at(source_name, 0, 0, "", std::string("internal bug: unexpected error while reading the spec: ") + error.what());
  }
  result.diagnostics = sink.take();
  result.warnings = sink.take_warnings();
  // A message never carries a secret value, whatever quoted it (man 5 dtrain-spec, SECRETS).
  for (auto* list : {&result.diagnostics, &result.warnings}) {
    for (Diagnostic& diagnostic : *list) diagnostic.message = redact_values(std::move(diagnostic.message), secrets);
  }
  return result;
}

LoadResult load_job_spec(const std::string& path, const std::vector<Override>& overrides, EnvValues env_values) {
  auto text = read_text_file(path);
  if (!text) {
    LoadResult result;
    result.diagnostics.push_back({path, 0, 0, "", text.error().message + "; give the path of a job spec (YAML)"});
    return result;
  }
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  return parse_job_spec(*text, path, base_dir.empty() ? "." : base_dir, overrides, env_values);
}

}  // namespace dtrain::spec
