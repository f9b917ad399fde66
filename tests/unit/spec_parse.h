#pragma once
// For the tests of one spec section: the section's YAML after a minimal valid head (version and
// a worker command), parsed as "job.yaml" in /specs, and the one diagnostic a bad value gives.
// The section then starts on line 4 of job.yaml.

#include <string>

#include <doctest/doctest.h>

#include "launcher/spec/spec_loader.h"

namespace dtrain::testing {

inline const std::string kSpecHead = "version: 1\nworker:\n  command: [python3, train.py]\n";

/// kSpecHead + `section`, parsed.
inline spec::LoadResult parse_section(const std::string& section) {
  return spec::parse_job_spec(kSpecHead + section, "job.yaml", "/specs", {});
}

/// The one diagnostic that kSpecHead + `section` gives, as "file:line:col: key: message".
inline std::string only_section_error(const std::string& section) {
  spec::LoadResult result = parse_section(section);
  REQUIRE_FALSE(result.ok());
  REQUIRE_MESSAGE(result.diagnostics.size() == 1, result.message());
  return result.diagnostics[0].to_string();
}

}  // namespace dtrain::testing
