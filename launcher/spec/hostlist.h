#pragma once
// Host expressions as users write them in `hosts`, `spares` and hostfiles, and the DeepSpeed
// include/exclude filters. Internal to launcher/spec; the public entry points are declared in
// spec_loader.h (expand_hostlist, parse_hostfile, apply_include_exclude).

#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::spec {

/// A problem on one line of a hostfile or env file; column is 1-based, 0 when unknown.
struct LineProblem {
  int line = 0;
  int column = 0;
  std::string message;
};

/// "user@gpu[01-02]:2222,gpu07 slots=4" → one HostEntry per name. The optional attributes after
/// whitespace are `slots=N` (and Open MPI's `max_slots=N`, accepted and ignored). slots stays 0
/// when not given.
Result<std::vector<HostEntry>> parse_host_expression(std::string_view text);

/// Hostfile reader that reports every bad line instead of only the first. `lines`, when given,
/// receives the 1-based line of each returned host.
std::vector<HostEntry> read_hostfile(std::string_view text, std::vector<LineProblem>& problems,
                                     std::vector<int>* lines = nullptr);

/// "KEY=VALUE" lines ('#' comments, blank lines); values are taken literally to the line's end.
std::vector<std::pair<std::string, std::string>> read_env_file(std::string_view text,
                                                               std::vector<LineProblem>& problems);

/// [A-Za-z_][A-Za-z0-9_]*
bool is_env_name(std::string_view name);

/// The offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates and
/// code points past U+10FFFF count as invalid), or npos. The resolved spec is written as UTF-8
/// YAML, which cannot carry other bytes: they would come back as U+FFFD on resume.
size_t find_invalid_utf8(std::string_view text);

}  // namespace dtrain::spec
