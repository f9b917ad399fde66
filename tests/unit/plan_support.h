#pragma once
// Specs built in code for the plan tests (no YAML: the plan must not depend on the loader).

#include <string>
#include <vector>

#include "launcher/spec/job_spec.h"

namespace dtrain::plan::testing {

inline spec::JobSpec make_spec(const std::vector<std::string>& hosts, int slots_per_host,
                               int tensor, int pipeline, int data) {
  spec::JobSpec spec;
  spec.name = "test";
  for (const std::string& name : hosts) {
    spec::HostEntry host;
    host.name = name;
    spec.hosts.push_back(host);
  }
  spec.slots_per_host = slots_per_host;
  spec.parallelism = {tensor, pipeline, data};
  return spec;
}

inline void add_spares(spec::JobSpec& spec, const std::vector<std::string>& spares) {
  for (const std::string& name : spares) {
    spec::HostEntry host;
    host.name = name;
    host.spare = true;
    spec.spares.push_back(host);
  }
}

}  // namespace dtrain::plan::testing
