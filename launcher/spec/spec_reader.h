#pragma once
// Reading typed values out of a YAML tree while collecting diagnostics. Internal to
// launcher/spec: every reader reports a problem (with the node's file:line:col, the dotted key,
// the quoted value and a fix) and returns nullopt instead of stopping, so a user sees every
// problem of a spec at once.

#include <yaml-cpp/yaml.h>

#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::spec {

/// Where diagnostics go. Keys set by `--set` (and everything below them) are reported as file
/// "--set": their nodes have no place in the spec file.
class DiagnosticSink {
 public:
  DiagnosticSink(std::string file, std::vector<std::string> override_keys);

  /// A problem at `node` (its mark gives line and column), under dotted `key`.
  void error(const YAML::Node& node, const std::string& key, std::string message);
  /// A problem at an explicit place (another file, or a line of one).
  void error_at(std::string file, int line, int column, std::string key, std::string message);
  /// The place `node` would be reported at, without a message.
  Diagnostic locate(const YAML::Node& node, const std::string& key) const;
  /// Something worth saying that does not stop the spec from loading.
  void warning(const YAML::Node& node, const std::string& key, std::string message);
  std::vector<Diagnostic> take_warnings() { return std::move(warnings_); }

  bool empty() const { return diagnostics_.empty(); }
  const std::string& file() const { return file_; }
  std::vector<Diagnostic> take();

 private:
  bool from_override(const std::string& key) const;

  std::string file_;
  std::vector<std::string> override_keys_;
  std::vector<Diagnostic> diagnostics_;
  std::vector<Diagnostic> warnings_;
};

/// A mapping of the spec with the keys it allows. Construction reports a value that is not a
/// mapping, unknown keys (with "did you mean"), and duplicate keys. Password keys are left to
/// refuse_passwords, which reports them once wherever they are.
class Section {
 public:
  /// `node` may be nullptr (the section is absent): then every get() is nullptr.
  Section(DiagnosticSink& sink, const YAML::Node* node, std::string path,
          const std::vector<std::string>& keys);

  /// The value under `key`; nullptr when absent or written as null (`key:` with nothing).
  const YAML::Node* get(const std::string& key) const;
  /// "heartbeat.timeout" for key "timeout" in section "heartbeat".
  std::string path(const std::string& key) const;
  /// The mapping itself (for locating problems that concern the whole section); may be null.
  const YAML::Node* node() const { return present_ ? &node_ : nullptr; }

 private:
  std::string path_;
  YAML::Node node_;
  bool present_ = false;
  std::vector<std::pair<std::string, YAML::Node>> values_;
};

/// "'text'", "a list", "a mapping" or "nothing": how a node reads in a message.
std::string describe(const YAML::Node& node);
std::string single_quoted(std::string_view text);
/// closest_match, plus one pair of swapped neighbours ("prot" → "port"); "" when nothing is near.
std::string suggest(std::string_view word, const std::vector<std::string>& candidates);

std::optional<std::string> read_string(DiagnosticSink& sink, const YAML::Node* node, const std::string& key);
/// A whole number in [min, max].
std::optional<int> read_int(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                            int min, int max = INT_MAX);
/// "500ms", "10s", "5m", "1h"; at least `min`.
std::optional<Millis> read_duration(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                    Millis min);
/// A duration as read_duration, or "auto": Millis(0).
std::optional<Millis> read_duration_or_auto(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                            Millis min);
/// One of `choices`, with "did you mean" for a near miss.
std::optional<std::string> read_choice(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                       const std::vector<std::string>& choices);
/// A list of strings; with `allow_single`, one string is read as a list of one.
std::optional<std::vector<std::string>> read_string_list(DiagnosticSink& sink, const YAML::Node* node,
                                                         const std::string& key, bool allow_single);

/// password, passwd, passphrase (any case).
bool is_password_key(std::string_view key);
/// Refuses every mapping key of the spec named like a password, at any depth, except inside
/// worker.env (the user's own environment variables).
void refuse_passwords(DiagnosticSink& sink, const YAML::Node& root);

/// `path` relative to `base_dir` unless absolute; "." or "" as base_dir leaves it as written.
std::string resolve_path(const std::string& base_dir, const std::string& path);
/// Largest spec, hostfile or env_file read_text_file() accepts.
inline constexpr size_t kMaxTextFileBytes = 16 << 20;
/// The whole file (read_regular_file, links followed: the path is the user's own); a missing or
/// unreadable file, anything but a regular file (a FIFO, a socket, a device, a directory) or a
/// file over kMaxTextFileBytes is a user error naming it and why, without waiting or reading.
Result<std::string> read_text_file(const std::string& path);

}  // namespace dtrain::spec
