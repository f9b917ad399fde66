#include "launcher/plan/advice.h"

#include <cmath>
#include <cstdio>

namespace dtrain::plan {

namespace {

using Intent = spec::IntentSettings;

/// Optimizer state per parameter, fp32 master copy included when the weights are narrower.
double optimizer_bytes_per_parameter(const Intent& intent) {
  double master = spec::bytes_per_weight(intent.precision) < 4 ? 4 : 0;
  switch (intent.optimizer) {
    case Intent::Optimizer::adam:
    case Intent::Optimizer::adamw: return 8 + master;
    case Intent::Optimizer::sgd_momentum: return 4 + master;
    case Intent::Optimizer::sgd:
    case Intent::Optimizer::adafactor: return master;
    case Intent::Optimizer::none: return 0;
  }
  return 0;
}

/// Model state on one GPU of a layout: TP and PP divide everything, a sharded optimizer divides
/// its state over the data-parallel replicas.
double bytes_per_gpu(const ModelState& state, int data, int tensor, int pipeline, bool sharded_optimizer) {
  double split = static_cast<double>(tensor) * pipeline;
  double optimizer = state.optimizer / split / (sharded_optimizer ? data : 1);
  return (state.weights + state.gradients) / split + optimizer;
}

/// The candidates, in the order the founding document prefers them: plain data parallelism, the
/// optimizer state sharded over it, TP within a host (2, 4, ... up to its GPUs), PP across hosts,
/// then TP × PP; each with and without the sharded optimizer where that is what makes it fit.
std::vector<LayoutCandidate> candidates_for(const ModelState& state, const Hardware& hardware) {
  int world = hardware.hosts * hardware.gpus_per_host;
  double usable = hardware.gpu_memory_bytes * (1 - hardware.headroom);
  std::vector<LayoutCandidate> out;
  auto add = [&](std::string name, int tensor, int pipeline, bool sharded) {
    if (tensor * pipeline > world || world % (tensor * pipeline) != 0) return;
    LayoutCandidate candidate{std::move(name), world / (tensor * pipeline), tensor, pipeline, sharded};
    candidate.bytes_per_gpu = bytes_per_gpu(state, candidate.data, tensor, pipeline, sharded);
    candidate.fits = candidate.bytes_per_gpu <= usable;
    out.push_back(candidate);
  };
  add("data parallel", 1, 1, false);
  if (world > 1) add("data parallel, optimizer state sharded", 1, 1, true);
  for (int tensor = 2; tensor <= hardware.gpus_per_host; tensor *= 2) {
    if (hardware.gpus_per_host % tensor == 0) add("TP " + std::to_string(tensor) + " within a host", tensor, 1, false);
  }
  for (int pipeline = 2; pipeline <= hardware.hosts; ++pipeline) {
    if (hardware.hosts % pipeline == 0) add("PP " + std::to_string(pipeline) + " across hosts", 1, pipeline, false);
  }
  for (int tensor = 2; tensor <= hardware.gpus_per_host; tensor *= 2) {
    if (hardware.gpus_per_host % tensor != 0) continue;
    for (int pipeline = 2; pipeline <= hardware.hosts; ++pipeline) {
      if (hardware.hosts % pipeline != 0) continue;
      std::string name = "TP " + std::to_string(tensor) + " x PP " + std::to_string(pipeline);
      add(name, tensor, pipeline, false);
      add(name + ", optimizer state sharded", tensor, pipeline, true);
    }
  }
  return out;
}

/// Micro-batches per data-parallel replica per step, from the spec's batch, when it says.
std::optional<int> micro_batches(const spec::BatchSettings& batch, int data) {
  if (batch.global <= 0 || batch.micro <= 0 || data <= 0 || batch.global % (batch.micro * data) != 0) return std::nullopt;
  return batch.global / (batch.micro * data);
}

}  // namespace

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

std::optional<ModelState> model_state(const Intent& intent) {
  double parameters = intent.parameters;
  double weight = spec::bytes_per_weight(intent.precision);
  double optimizer = optimizer_bytes_per_parameter(intent);
  double gradient = intent.optimizer == Intent::Optimizer::none ? 0 : weight;
  double per_parameter = weight + gradient + optimizer;
  char source[160];
  if (intent.state_bytes > 0) {
    // The user's total, split in the proportions of the precision and optimizer given.
    double total = static_cast<double>(intent.state_bytes);
    std::snprintf(source, sizeof source, "intent.model.state_bytes %s, split as %s with %s", gigabytes(total).c_str(),
                  spec::to_string(intent.precision), spec::to_string(intent.optimizer));
    return ModelState{total * weight / per_parameter, total * gradient / per_parameter, total * optimizer / per_parameter, source};
  }
  if (parameters <= 0) return std::nullopt;
  std::snprintf(source, sizeof source, "%.3g parameters x %.0f bytes (%s weights and gradients, %s state)", parameters,
                per_parameter, spec::to_string(intent.precision), spec::to_string(intent.optimizer));
  return ModelState{parameters * weight, parameters * gradient, parameters * optimizer, source};
}

double pipeline_bubble(int stages, int micro_batches) {
  if (stages <= 1 || micro_batches <= 0) return 0;
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

double young_daly_interval(double cost_seconds, double mtbf_seconds) {
  return std::sqrt(2 * cost_seconds * mtbf_seconds);
}

Advice advise(const AdviceInputs& inputs) {
  Advice advice;
  advice.hardware = inputs.hardware;
  advice.state = model_state(inputs.spec.intent);
  if (advice.state && inputs.hardware.gpu_memory_bytes > 0) {
    advice.candidates = candidates_for(*advice.state, inputs.hardware);
    for (size_t i = 0; i < advice.candidates.size(); ++i) {
      if (advice.candidates[i].fits) {
        advice.recommended = i;
        break;
      }
    }
    double usable = inputs.hardware.gpu_memory_bytes * (1 - inputs.hardware.headroom);
    if (advice.recommended) {
      const LayoutCandidate& chosen = advice.candidates[*advice.recommended];
      if (*advice.recommended == 0) {
        advice.reasons.push_back("the model state (" + gigabytes(advice.state->total()) + ") fits one GPU's " + gigabytes(usable) +
                                 " (its memory less " + std::to_string(static_cast<int>(inputs.hardware.headroom * 100)) +
                                 " % headroom): data parallelism, the simplest and fastest");
      } else {
        advice.reasons.push_back("the model state (" + gigabytes(advice.state->total()) + ") does not fit one GPU's " + gigabytes(usable) +
                                 ", so data parallelism alone cannot hold it");
        advice.reasons.push_back(chosen.name + " is the first layout, in the order data parallel, sharded optimizer, "
                                 "TP within a host, PP across hosts, TP x PP, that fits: " + gigabytes(chosen.bytes_per_gpu) + " a GPU");
      }
      if (inputs.spec.intent.gpu_memory_bytes > 0 && static_cast<double>(inputs.spec.intent.gpu_memory_bytes) > inputs.hardware.gpu_memory_bytes) {
        advice.reasons.push_back("but intent.gpu_memory (" + gigabytes(static_cast<double>(inputs.spec.intent.gpu_memory_bytes)) +
                                 ") is more than a GPU has (" + gigabytes(inputs.hardware.gpu_memory_bytes) + "): check the figure");
      }
      if (chosen.pipeline > 1) {
        if (std::optional<int> m = micro_batches(inputs.spec.batch, chosen.data)) {
          advice.bubble = pipeline_bubble(chosen.pipeline, *m);
          advice.bubble_source = std::to_string(*m) + " micro-batches per replica (batch.global / (batch.micro x " +
                                 std::to_string(chosen.data) + " replicas))";
        } else {
          advice.bubble_source = "batch.global and batch.micro do not say how many micro-batches a replica runs";
        }
      }
      // A ring all-reduce sends 2 (n - 1) / n of the buffer from each GPU.
      double gradients = advice.state->gradients / (chosen.tensor * chosen.pipeline);
      if (chosen.data > 1) advice.gradient_bytes_per_step = gradients * 2.0 * (chosen.data - 1) / chosen.data;
      if (inputs.hardware.network_bytes_per_second > 0 && advice.gradient_bytes_per_step > 0) {
        advice.gradient_seconds = advice.gradient_bytes_per_step / inputs.hardware.network_bytes_per_second;
      }
    }
  }
  CheckpointAdvice checkpoint;
  checkpoint.cost_seconds = inputs.checkpoint_cost_seconds.value_or(kDefaultCheckpointCostSeconds);
  checkpoint.cost_source = inputs.checkpoint_cost_seconds ? inputs.checkpoint_cost_source : "the default (no save measured)";
  double hosts = std::max(1, inputs.hardware.hosts);
  checkpoint.mtbf_seconds = inputs.mtbf_seconds.value_or(kDefaultHostMtbfSeconds / hosts);
  checkpoint.mtbf_source = inputs.mtbf_seconds ? inputs.mtbf_source
                                               : "the default: one failure per host per 30 days, over " +
                                                     std::to_string(static_cast<int>(hosts)) + " host(s)";
  checkpoint.interval_seconds = young_daly_interval(checkpoint.cost_seconds, checkpoint.mtbf_seconds);
  if (inputs.step_seconds && *inputs.step_seconds > 0) checkpoint.interval_steps = checkpoint.interval_seconds / *inputs.step_seconds;
  advice.checkpoint = checkpoint;
  return advice;
}

nlohmann::json to_json(const Advice& advice) {
  nlohmann::json out = {{"hardware", {{"hosts", advice.hardware.hosts},
                                      {"gpus_per_host", advice.hardware.gpus_per_host},
                                      {"gpu_memory_bytes", advice.hardware.gpu_memory_bytes},
                                      {"headroom", advice.hardware.headroom}}}};
  if (advice.state) {
    out["model_state"] = {{"weights_bytes", advice.state->weights}, {"gradients_bytes", advice.state->gradients},
                          {"optimizer_bytes", advice.state->optimizer}, {"total_bytes", advice.state->total()},
                          {"source", advice.state->source}};
  }
  out["candidates"] = nlohmann::json::array();
  for (const LayoutCandidate& candidate : advice.candidates) {
    out["candidates"].push_back({{"name", candidate.name}, {"data", candidate.data}, {"tensor", candidate.tensor},
                                 {"pipeline", candidate.pipeline}, {"sharded_optimizer", candidate.sharded_optimizer},
                                 {"bytes_per_gpu", candidate.bytes_per_gpu}, {"fits", candidate.fits}});
  }
  out["recommended"] = advice.recommended ? nlohmann::json(advice.candidates[*advice.recommended].name) : nlohmann::json();
  out["reasons"] = advice.reasons;
  if (advice.bubble) out["pipeline_bubble"] = *advice.bubble;
  if (!advice.bubble_source.empty()) out["pipeline_bubble_source"] = advice.bubble_source;
  out["gradient_bytes_per_step"] = advice.gradient_bytes_per_step;
  if (advice.gradient_seconds) out["gradient_seconds_per_step"] = *advice.gradient_seconds;
  if (advice.checkpoint) {
    const CheckpointAdvice& c = *advice.checkpoint;
    out["checkpoint"] = {{"cost_seconds", c.cost_seconds}, {"cost_source", c.cost_source},
                         {"mtbf_seconds", c.mtbf_seconds}, {"mtbf_source", c.mtbf_source},
                         {"interval_seconds", c.interval_seconds}};
    if (c.interval_steps) out["checkpoint"]["interval_steps"] = *c.interval_steps;
  }
  return out;
}

}  // namespace dtrain::plan
