// Fuzz target: the YAML job-spec loader with `--set key=value` overrides.
// Input: leading lines "--set key=value" are overrides (as on the command line), the rest is
// the spec's YAML. Relative hostfile/env_file paths resolve in configs/examples, so "hostfile:
// hostfile" and "env_file: train.env" read real files.
// Invariants: the loader returns (never throws, never crashes); a failure has diagnostics, each
// with a message, none of them "internal bug"; a spec that loads has hosts, and its resolved
// YAML (to_yaml, what a run directory keeps) loads back to an equal spec (with its pass_env
// variables exported, as for a resume) and writes out the same.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "launcher/base/secrets.h"
#include "launcher/base/strings.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest = as_text(data, size);
  std::vector<spec::Override> overrides;
  while (starts_with(rest, "--set ")) {
    auto [line, after] = first_line(rest);
    rest = after;
    auto parsed = spec::parse_override(line.substr(6));
    if (parsed) {
      check(!parsed->key.empty(), "an override has a key");
      overrides.push_back(std::move(*parsed));
    } else {
      check(!parsed.error().message.empty(), "a bad override says what is wrong");
    }
  }

  spec::LoadResult loaded = spec::parse_job_spec(std::string(rest), "job.yaml", DTRAIN_FUZZ_SPEC_DIR, overrides);
  for (const spec::Diagnostic& diagnostic : loaded.diagnostics) {
    check(!diagnostic.message.empty(), "a diagnostic says what is wrong", diagnostic.to_string());
    // The loader reports an exception that escaped yaml-cpp as "internal bug: ..." (the user's
    // own text may say "internal bug" anywhere else in a message).
    check(!starts_with(diagnostic.message, "internal bug"), "no input is an internal bug", diagnostic.to_string());
  }
  if (!loaded.ok()) {
    check(!loaded.diagnostics.empty(), "a spec that fails to load has a diagnostic");
    return 0;
  }
  check(loaded.diagnostics.empty(), "a spec that loads has no diagnostics", loaded.message());
  const spec::JobSpec& spec = *loaded.spec;
  check(!spec.hosts.empty(), "a loaded spec has a host");

  // The round trip of the largest specs (65536 hosts: 2 MB of YAML) takes about 5 s at -O2 and
  // far longer under ASan; past a few thousand hosts it would only spend the campaign's time.
  if (spec.hosts.size() + spec.spares.size() > 4096) return 0;

  std::string yaml = spec::to_yaml(spec);
  // As a resume reads it: pass_env values (secret worker.env values among them) exported again,
  // the env_file read again from its absolute path.
  spec::JobSpec expected = spec;
  expected.source_path = "spec.yaml";
  for (const auto& [name, value] : spec.worker.env) {
    const auto& from_file = spec.worker.env_from_file;
    const auto& passed = spec.worker.pass_env;
    bool from_environment = std::binary_search(passed.begin(), passed.end(), name) ||
                            (looks_secret(name) && !std::binary_search(from_file.begin(), from_file.end(), name));
    if (!from_environment) continue;
    ::setenv(name.c_str(), value.c_str(), 1);
    if (!std::binary_search(passed.begin(), passed.end(), name)) expected.worker.pass_env.push_back(name);
  }
  std::sort(expected.worker.pass_env.begin(), expected.worker.pass_env.end());
  spec::LoadResult again = spec::parse_job_spec(yaml, "spec.yaml", "/nonexistent");
  check(again.ok(), "the resolved spec loads again", yaml + "\n→ " + again.message());
  check(*again.spec == expected, "the resolved spec loads back equal", yaml);
  check(spec::to_yaml(*again.spec) == yaml, "the resolved spec writes out the same", yaml);
  return 0;
}
