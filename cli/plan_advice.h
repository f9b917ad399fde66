#pragma once
// `dtrain plan SPEC --advise` (cli/plan_advice.cpp).

#include <string>

#include "launcher/plan/advice.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::cli {

struct AdviseOptions {
  int gpus_per_host = 0;        ///< 0: the spec's slots_per_host
  std::string gpu_memory;       ///< "80GB"
  double network_gbps = 0;      ///< between hosts; 0: not declared
  std::string checkpoint_cost;  ///< "30s": one save; empty: the default
  std::string mtbf;             ///< "24h": the job's; empty: the registry, else the default
  std::string step_time;        ///< "1.2s": for the interval in steps
};

int run_plan_advice(const spec::JobSpec& spec, const AdviseOptions& options, bool json);

}  // namespace dtrain::cli
