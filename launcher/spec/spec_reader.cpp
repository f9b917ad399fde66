#include "launcher/spec/spec_reader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"

namespace dtrain::spec {

DiagnosticSink::DiagnosticSink(std::string file, std::vector<std::string> override_keys)
    : file_(std::move(file)), override_keys_(std::move(override_keys)) {}

bool DiagnosticSink::from_override(const std::string& key) const {
  for (const std::string& set : override_keys_) {
    if (key == set || starts_with(key, set + ".") || starts_with(key, set + "[")) return true;
  }
  return false;
}

Diagnostic DiagnosticSink::locate(const YAML::Node& node, const std::string& key) const {
  Diagnostic where;
  where.key = key;
  YAML::Mark mark = node.Mark();
  // Sections that an override had to create ("--set hearbeat.interval=2s") have no mark.
  bool created_by_override = mark.is_null() && std::any_of(override_keys_.begin(), override_keys_.end(), [&](const std::string& set) {
                               return starts_with(set, key + ".");
                             });
  if (from_override(key) || created_by_override) {
    where.file = "--set";
    return where;
  }
  where.file = file_;
  if (!mark.is_null()) {
    where.line = mark.line + 1;
    where.column = mark.column + 1;
  }
  return where;
}

void DiagnosticSink::error(const YAML::Node& node, const std::string& key, std::string message) {
  Diagnostic diagnostic = locate(node, key);
  diagnostic.message = std::move(message);
  diagnostics_.push_back(std::move(diagnostic));
}

void DiagnosticSink::warning(const YAML::Node& node, const std::string& key, std::string message) {
  Diagnostic diagnostic = locate(node, key);
  diagnostic.message = std::move(message);
  warnings_.push_back(std::move(diagnostic));
}

void DiagnosticSink::error_at(std::string file, int line, int column, std::string key, std::string message) {
  diagnostics_.push_back({std::move(file), line, column, std::move(key), std::move(message)});
}

std::vector<Diagnostic> DiagnosticSink::take() {
  // Overrides first, then the spec in file order, then other files (hostfile, env_file).
  auto rank = [this](const Diagnostic& d) { return d.file == "--set" ? 0 : d.file == file_ ? 1 : 2; };
  std::stable_sort(diagnostics_.begin(), diagnostics_.end(), [&](const Diagnostic& a, const Diagnostic& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (a.file != b.file) return a.file < b.file;
    if (a.line != b.line) return a.line < b.line;
    return a.column < b.column;
  });
  return std::move(diagnostics_);
}

std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string match = closest_match(word, candidates);
  if (!match.empty()) return match;
  // Two swapped neighbours ("prot" for "port") count as one slip, not two edits.
  for (const std::string& candidate : candidates) {
    if (candidate.size() != word.size()) continue;
    std::string swapped(word);
    for (size_t i = 0; i + 1 < swapped.size(); ++i) {
      std::swap(swapped[i], swapped[i + 1]);
      if (swapped == candidate) return candidate;
      std::swap(swapped[i], swapped[i + 1]);
    }
  }
  return "";
}

std::string single_quoted(std::string_view text) {
  // printable(): a NUL would cut the message where C strings end (the user would see `name: '`).
  return "'" + printable(text) + "'";
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return single_quoted(node.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "nothing";
  }
}

Section::Section(DiagnosticSink& sink, const YAML::Node* node, std::string path,
                 const std::vector<std::string>& keys)
    : path_(std::move(path)) {
  if (node == nullptr || node->IsNull()) return;
  if (!node->IsMap()) {
    sink.error(*node, path_, "expected a mapping of keys (" + join(keys, ", ") + "), got " + describe(*node));
    return;
  }
  node_ = *node;
  present_ = true;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    YAML::Node key_node = it->first;
    std::string key = key_node.IsScalar() ? key_node.Scalar() : describe(key_node);
    std::string full = this->path(key);
    if (is_password_key(key)) continue;  // refuse_passwords reports it
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string hint = suggest(key, keys);
      sink.error(key_node, full,
                 "unknown key " + single_quoted(key) +
                     (hint.empty() ? "; known keys here: " + join(keys, ", ") : "; did you mean " + single_quoted(hint) + "?"));
      continue;
    }
    auto seen = std::find_if(values_.begin(), values_.end(), [&](const auto& v) { return v.first == key; });
    if (seen != values_.end()) {
      sink.error(key_node, full, "key " + single_quoted(key) + " is given twice; keep one");
      continue;
    }
    values_.emplace_back(key, it->second);
  }
}

const YAML::Node* Section::get(const std::string& key) const {
  for (const auto& [name, value] : values_) {
    if (name == key) return value.IsNull() ? nullptr : &value;
  }
  return nullptr;
}

std::string Section::path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

namespace {

// DEL (0x7f) reaches a value through a YAML escape ("\x7f") or --set, but yaml-cpp writes it
// back raw, which YAML does not allow: the run's spec.yaml would not load again on resume.
// Refuse it where the user can fix it (found by fuzz/spec_loader).
bool refuse_delete_byte(DiagnosticSink& sink, const YAML::Node& node, const std::string& key) {
  if (node.Scalar().find('\x7f') == std::string::npos) return false;
  sink.error(node, key, single_quoted(node.Scalar()) + " holds the control byte 0x7f (DEL); remove it");
  return true;
}

}  // namespace

std::optional<std::string> read_string(DiagnosticSink& sink, const YAML::Node* node, const std::string& key) {
  if (node == nullptr) return std::nullopt;
  if (!node->IsScalar()) {
    sink.error(*node, key, "expected a string, got " + describe(*node));
    return std::nullopt;
  }
  if (refuse_delete_byte(sink, *node, key)) return std::nullopt;
  return node->Scalar();
}

std::optional<int> read_int(DiagnosticSink& sink, const YAML::Node* node, const std::string& key, int min, int max) {
  if (node == nullptr) return std::nullopt;
  std::string expected = max >= (1 << 20) ? "a whole number of at least " + std::to_string(min)
                                        : "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  if (!node->IsScalar()) {
    sink.error(*node, key, "expected " + expected + ", got " + describe(*node));
    return std::nullopt;
  }
  const std::string& text = node->Scalar();
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    sink.error(*node, key, "expected " + expected + ", got " + single_quoted(text));
    return std::nullopt;
  }
  return static_cast<int>(value);
}

std::optional<Millis> read_duration(DiagnosticSink& sink, const YAML::Node* node, const std::string& key, Millis min) {
  if (node == nullptr) return std::nullopt;
  if (!node->IsScalar()) {
    sink.error(*node, key, "expected a duration such as 500ms, 10s, 5m or 1h, got " + describe(*node));
    return std::nullopt;
  }
  auto duration = parse_duration(node->Scalar());
  if (!duration) {
    sink.error(*node, key, duration.error().message);
    return std::nullopt;
  }
  if (*duration < min) {
    sink.error(*node, key, single_quoted(node->Scalar()) + " is too short; it must be at least " + format_duration(min));
    return std::nullopt;
  }
  return *duration;
}

std::optional<Millis> read_duration_or_auto(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                            Millis min) {
  if (node == nullptr) return std::nullopt;
  if (node->IsScalar() && node->Scalar() == "auto") return Millis(0);
  if (!node->IsScalar() || !parse_duration(node->Scalar())) {
    sink.error(*node, key, "expected \"auto\" or a duration such as 500ms, 10s, 5m or 1h, got " + describe(*node));
    return std::nullopt;
  }
  return read_duration(sink, node, key, min);
}

std::optional<std::string> read_choice(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                       const std::vector<std::string>& choices) {
  auto text = read_string(sink, node, key);
  if (!text) return std::nullopt;
  if (std::find(choices.begin(), choices.end(), *text) != choices.end()) return text;
  std::string hint = suggest(*text, choices);
  sink.error(*node, key, single_quoted(*text) + " is not one of " + join(choices, ", ") +
                             (hint.empty() ? "" : "; did you mean " + single_quoted(hint) + "?"));
  return std::nullopt;
}

std::optional<std::vector<std::string>> read_string_list(DiagnosticSink& sink, const YAML::Node* node,
                                                         const std::string& key, bool allow_single) {
  if (node == nullptr) return std::nullopt;
  if (allow_single && node->IsScalar()) {
    if (refuse_delete_byte(sink, *node, key)) return std::nullopt;
    return std::vector<std::string>{node->Scalar()};
  }
  if (!node->IsSequence()) {
    sink.error(*node, key, "expected a list of strings, got " + describe(*node));
    return std::nullopt;
  }
  std::vector<std::string> items;
  bool ok = true;
  for (size_t i = 0; i < node->size(); ++i) {
    YAML::Node item = (*node)[i];
    if (!item.IsScalar()) {
      sink.error(item, key + "[" + std::to_string(i) + "]", "expected a string, got " + describe(item));
      ok = false;
      continue;
    }
    if (refuse_delete_byte(sink, item, key + "[" + std::to_string(i) + "]")) {
      ok = false;
      continue;
    }
    items.push_back(item.Scalar());
  }
  if (!ok) return std::nullopt;
  return items;
}

bool is_password_key(std::string_view key) {
  std::string lower(key);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower == "password" || lower == "passwd" || lower == "passphrase";
}

namespace {

void refuse_passwords_in(DiagnosticSink& sink, const YAML::Node& node, const std::string& path) {
  if (path == "worker.env") return;  // the user's environment variables, not spec keys
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) refuse_passwords_in(sink, node[i], path + "[" + std::to_string(i) + "]");
  } else if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
      std::string full = path.empty() ? key : path + "." + key;
      if (is_password_key(key)) {
        sink.error(it->first, full, "passwords are not accepted; use an SSH key (ssh.identity) or ssh-agent");
        continue;
      }
      refuse_passwords_in(sink, it->second, full);
    }
  }
}

}  // namespace

void refuse_passwords(DiagnosticSink& sink, const YAML::Node& root) { refuse_passwords_in(sink, root, ""); }

std::string resolve_path(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty() || base_dir == ".") return path;
  return base_dir + "/" + path;
}

Result<std::string> read_text_file(const std::string& path) {
  // The user's own file: a link they made is followed. A FIFO (a shell's <(...) too), a socket
  // or a device is refused before anything waits on it or reads it without end.
  return read_regular_file(path, kMaxTextFileBytes, FollowLinks::kYes,
                           "a job spec, hostfile or env_file is far smaller (is it the right file?)");
}

}  // namespace dtrain::spec
