// `dtrain plan SPEC --advise`: the layout and checkpoint advice of launcher/plan/advice.h for the
// job's intent, on the hardware the user declares (--gpus-per-host, --gpu-memory), with the
// job's hosts' failure history from the registry when it has one. Every figure says its source.

#include "cli/plan_advice.h"

#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/plan/target_time.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/registry/registry_step_times.h"
#include "launcher/report/run_record.h"

namespace dtrain::cli {

namespace {

/// "12.0s", "3h28m": a figure to read (DurationStyle::tenths).
std::string seconds_text(double seconds) {
  return format_duration(Millis(static_cast<int64_t>(std::llround(seconds * 1000))), DurationStyle::tenths);
}

/// The job's mean time between failures from the registry's last 90 days: each of its hosts'
/// root-cause failures per hour held (GPU-hours over its GPUs), summed over the hosts. None when
/// the registry cannot be read or records no failure of these hosts (then the default is used).
void mtbf_from_registry(const spec::JobSpec& spec, int gpus_per_host, plan::AdviceInputs& inputs) {
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) return;
  int64_t now = SystemClock().wall_ms();
  registry::PeriodQuery period{now - 90ll * 24 * 3600 * 1000, std::nullopt, now};
  Result<std::vector<registry::HostReliability>> hosts = registry::host_reliability(*db, period);
  if (!hosts) return;
  std::set<std::string> names;
  for (const spec::HostEntry& host : spec.hosts) names.insert(host.name);
  double failures_per_hour = 0;
  int failures = 0;
  double hours = 0;
  for (const registry::HostReliability& host : *hosts) {
    if (names.count(host.host) == 0 || host.unit_hours() <= 0) continue;
    double held_hours = host.unit_hours() / std::max(1, gpus_per_host);
    failures_per_hour += host.root_cause_failures / held_hours;
    failures += host.root_cause_failures;
    hours += held_hours;
  }
  if (failures == 0) return;
  inputs.mtbf_seconds = 3600.0 / failures_per_hour;
  char source[160];
  std::snprintf(source, sizeof source, "the registry: %d root-cause failure(s) of these hosts in %.0f host-hours over 90 days",
                failures, hours);
  inputs.mtbf_source = source;
}

/// The step time of the job's earlier runs in the registry (each run's the median step_ms of
/// its metrics.jsonl); none with the reason and the way to get one.
std::optional<plan::MeasuredStepTime> step_time_from_registry(const spec::JobSpec& spec, int world_size, std::string& missing) {
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) {
    missing = "no registry to find earlier runs in (" + db.error().message + "); run the job once, or give --step-time";
    return std::nullopt;
  }
  auto run_step_ms = [](const std::string& run_dir) {
    report::RunRecord metrics;
    report::read_metrics_files(run_dir, metrics);
    return report::median_step_ms(metrics.training);
  };
  Result<registry::JobStepTime> measured = registry::job_step_time(*db, spec.name, world_size, run_step_ms);
  if (!measured) {
    missing = measured.error().message + "; give --step-time";
    return std::nullopt;
  }
  if (!measured->median_step_ms) {
    missing = measured->source;
    return std::nullopt;
  }
  return plan::MeasuredStepTime{*measured->median_step_ms / 1000, measured->source};
}

std::string target_text(const plan::TargetTime& target) {
  std::string out = "target time   " + plan::verdict_text(target) + "\n";
  if (target.steps) out += "  steps       " + target.steps_source + "\n";
  if (target.step) {
    char step[32];  // a fast step is milliseconds: tenths of a second would read 0.0s
    if (target.step->seconds < 1) std::snprintf(step, sizeof step, "%.1fms", target.step->seconds * 1000);
    out += "  step time   " + (target.step->seconds < 1 ? std::string(step) : seconds_text(target.step->seconds)) + ": " +
           target.step->source + "\n";
  }
  if (target.expected_seconds) out += "  expected    steps x step time = " + seconds_text(*target.expected_seconds) + "\n";
  if (target.target_seconds) out += "  target      " + seconds_text(*target.target_seconds) + " (intent.target_duration)\n";
  for (const std::string& missing : target.missing) out += "  missing     " + missing + "\n";
  return out;
}

std::string to_text(const plan::Advice& advice, const spec::JobSpec& spec) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "hardware      %d host(s) x %d GPU(s) of %s (%.0f %% kept free for activations)\n",
                advice.hardware.hosts, advice.hardware.gpus_per_host, plan::gigabytes(advice.hardware.gpu_memory_bytes).c_str(),
                advice.hardware.headroom * 100);
  out += line;
  if (!advice.state) {
    out += "layout        no advice: the spec's intent gives neither intent.model.parameters nor state_bytes\n";
  } else {
    out += "model state   " + plan::gigabytes(advice.state->total()) + " = weights " + plan::gigabytes(advice.state->weights) + " + gradients " +
           plan::gigabytes(advice.state->gradients) + " + optimizer " + plan::gigabytes(advice.state->optimizer) + "  (" + advice.state->source + ")\n";
    out += "layouts       memory per GPU (model state; activations come out of the headroom):\n";
    for (size_t i = 0; i < advice.candidates.size(); ++i) {
      const plan::LayoutCandidate& c = advice.candidates[i];
      std::snprintf(line, sizeof line, "  %s %-44s dp %-4d tp %-2d pp %-2d %10s  %s\n",
                    advice.recommended && *advice.recommended == i ? "*" : " ", c.name.c_str(), c.data, c.tensor,
                    c.pipeline, plan::gigabytes(c.bytes_per_gpu).c_str(), c.fits ? "fits" : "does not fit");
      out += line;
    }
    if (advice.recommended) {
      out += "recommended   " + advice.candidates[*advice.recommended].name + "\n";
    } else {
      out += "recommended   nothing fits: the model state needs more GPUs or more memory per GPU than declared, "
             "or fully sharded data parallelism (FSDP / ZeRO-3), which dtrain does not plan\n";
    }
    for (const std::string& reason : advice.reasons) out += "  because     " + reason + "\n";
    if (!advice.bubble_source.empty()) {
      if (advice.bubble) {
        std::snprintf(line, sizeof line, "pipeline      idle %.0f %% of a step ((p - 1) / (m + p - 1), %s)\n", *advice.bubble * 100,
                      advice.bubble_source.c_str());
        out += line;
      } else {
        out += "pipeline      bubble unknown: " + advice.bubble_source + "\n";
      }
    }
    if (advice.gradient_bytes_per_step > 0) {
      out += "gradients     " + plan::gigabytes(advice.gradient_bytes_per_step) + " sent per GPU per step by the ring all-reduce";
      out += advice.gradient_seconds ? " (" + seconds_text(*advice.gradient_seconds) + " at the declared network rate)\n"
                                     : " (--network-gbps gives the time)\n";
    }
  }
  if (advice.checkpoint) {
    const plan::CheckpointAdvice& c = *advice.checkpoint;
    out += "checkpoints   every " + seconds_text(c.interval_seconds) + " (Young/Daly: sqrt(2 x save " +
           seconds_text(c.cost_seconds) + " x MTBF " + seconds_text(c.mtbf_seconds) + "))";
    if (c.interval_steps) {
      std::snprintf(line, sizeof line, " = every %.0f steps", std::max(1.0, std::floor(*c.interval_steps)));
      out += line;
    }
    out += "; now " + (spec.checkpoint.interval_steps > 0 ? "every " + std::to_string(spec.checkpoint.interval_steps) + " steps" : std::string("none")) + "\n";
    out += "  save cost   " + c.cost_source + "\n";
    out += "  MTBF        " + c.mtbf_source + "\n";
  }
  return out;
}

}  // namespace

int run_plan_advice(const spec::JobSpec& spec, const AdviseOptions& options, bool json) {
  plan::AdviceInputs inputs{spec, {}, {}, {}, {}, {}, {}};
  inputs.hardware.hosts = static_cast<int>(spec.hosts.size());
  inputs.hardware.gpus_per_host = options.gpus_per_host > 0 ? options.gpus_per_host : spec.slots_per_host;
  std::optional<double> memory = spec::parse_byte_size(options.gpu_memory);
  if (options.gpu_memory.empty() || !memory || *memory <= 0) {
    std::fprintf(stderr, "dtrain plan: --advise needs --gpu-memory, the memory of one GPU (e.g. 80GB), got '%s'\n",
                 options.gpu_memory.c_str());
    return to_int(ExitCode::usage);
  }
  inputs.hardware.gpu_memory_bytes = *memory;
  inputs.hardware.network_bytes_per_second = options.network_gbps * 1e9 / 8;
  if (!options.checkpoint_cost.empty()) {
    Result<Millis> cost = parse_duration(options.checkpoint_cost);
    if (!cost) {
      std::fprintf(stderr, "dtrain plan: --checkpoint-cost: %s\n", cost.error().message.c_str());
      return to_int(ExitCode::usage);
    }
    inputs.checkpoint_cost_seconds = static_cast<double>(cost->count()) / 1000;
    inputs.checkpoint_cost_source = "--checkpoint-cost";
  }
  if (!options.mtbf.empty()) {
    Result<Millis> mtbf = parse_duration(options.mtbf);
    if (!mtbf || mtbf->count() <= 0) {
      std::fprintf(stderr, "dtrain plan: --mtbf: expected a duration such as 24h\n");
      return to_int(ExitCode::usage);
    }
    inputs.mtbf_seconds = static_cast<double>(mtbf->count()) / 1000;
    inputs.mtbf_source = "--mtbf";
  } else {
    mtbf_from_registry(spec, inputs.hardware.gpus_per_host, inputs);
  }
  if (!options.step_time.empty()) {
    if (Result<Millis> step = parse_duration(options.step_time); step && step->count() > 0) {
      inputs.step_seconds = static_cast<double>(step->count()) / 1000;
    }
  }
  std::optional<plan::MeasuredStepTime> step;
  std::string step_missing;
  if (inputs.step_seconds) {
    step = plan::MeasuredStepTime{*inputs.step_seconds, "--step-time"};
  } else {
    step = step_time_from_registry(spec, inputs.hardware.hosts * inputs.hardware.gpus_per_host, step_missing);
  }
  plan::TargetTime target = plan::expected_time_to_target(spec, step, step_missing);
  plan::Advice advice = plan::advise(inputs);
  std::string text;
  if (json) {
    nlohmann::json out = plan::to_json(advice);
    out["target_time"] = plan::to_json(target);
    text = out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else {
    text = to_text(advice, spec) + target_text(target);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return to_int(ExitCode::ok);
}

}  // namespace dtrain::cli
