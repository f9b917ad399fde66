#pragma once
// `dtrain plan --advise` (issue 30 item 2): from the job's intent and the hosts' GPUs, the memory
// per GPU of each candidate layout, which fit, the one to use and why — in the founding
// document's order: data parallelism while the model fits one GPU, then sharding the optimizer
// state, then tensor parallelism within a host, then pipeline stages across hosts — the pipeline
// bubble, the data-parallel gradient traffic per step, and the checkpoint interval (Young/Daly).
// Pure: every input is passed in, and every figure says where it came from.
//
// Model state per parameter (mixed precision keeps an fp32 master copy):
//   weights b + gradients b + optimizer: adam/adamw 8 (+4 master when b < 4), sgd-momentum 4
//   (+4), sgd 0 (+4), adafactor 0 (+4: its factored moments are negligible), none: weights only.
//   7B with bf16 and AdamW: 7e9 × (2 + 2 + 4 + 8) = 112 GB.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/spec/job_spec.h"

namespace dtrain::plan {

/// The hardware the advice is for: declared (--gpus-per-host, --gpu-memory) or reported.
struct Hardware {
  int hosts = 1;
  int gpus_per_host = 1;
  double gpu_memory_bytes = 0;
  double network_bytes_per_second = 0;  ///< between hosts; 0: not known
  /// The share of a GPU's memory left for activations, buffers and the CUDA context.
  double headroom = 0.2;
};

/// Bytes of model state, split by what sharding divides.
struct ModelState {
  double weights = 0, gradients = 0, optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
  std::string source;  ///< "7e+09 parameters × 16 bytes (bf16, adamw)" or "intent.model.state_bytes"
};

/// The intent's model state; none when the intent says neither parameters nor state_bytes.
std::optional<ModelState> model_state(const spec::IntentSettings& intent);

struct LayoutCandidate {
  std::string name;  ///< "data parallel", "data parallel, optimizer state sharded", "TP 4 x PP 2", ...
  int data = 1, tensor = 1, pipeline = 1;
  bool sharded_optimizer = false;
  double bytes_per_gpu = 0;
  bool fits = false;
};

struct CheckpointAdvice {
  double cost_seconds = 0;         ///< one save
  std::string cost_source;
  double mtbf_seconds = 0;         ///< the job's mean time between failures
  std::string mtbf_source;
  double interval_seconds = 0;     ///< √(2 × cost × MTBF)
  std::optional<double> interval_steps;  ///< when a step time is known
};

struct Advice {
  Hardware hardware;
  std::optional<ModelState> state;
  std::vector<LayoutCandidate> candidates;  ///< in the order they are considered
  std::optional<size_t> recommended;        ///< index into candidates; none: nothing fits
  std::vector<std::string> reasons;         ///< why the recommended one, in words
  std::optional<double> bubble;             ///< the recommended layout's pipeline idle share
  std::string bubble_source;
  double gradient_bytes_per_step = 0;       ///< sent per GPU by a ring all-reduce of its gradients
  std::optional<double> gradient_seconds;   ///< at hardware.network_bytes_per_second
  std::optional<CheckpointAdvice> checkpoint;
};

struct AdviceInputs {
  spec::JobSpec spec;
  Hardware hardware;
  std::optional<double> checkpoint_cost_seconds;  ///< measured (earlier runs) or declared
  std::string checkpoint_cost_source;
  std::optional<double> mtbf_seconds;             ///< the hosts' failure history, or declared
  std::string mtbf_source;
  std::optional<double> step_seconds;             ///< measured step time, for the interval in steps
};

/// When no checkpoint cost or failure history is known: stated in the advice as defaults.
inline constexpr double kDefaultCheckpointCostSeconds = 60;
inline constexpr double kDefaultHostMtbfSeconds = 30.0 * 24 * 3600;  ///< one host: a month

Advice advise(const AdviceInputs& inputs);

/// `dtrain plan --advise --json`: every figure of the advice with its source.
nlohmann::json to_json(const Advice& advice);

/// "112.0 GB" (powers of 1000, as GPU memory is sold and as intent sizes are written).
std::string gigabytes(double bytes);

/// "0.43" → "43 %"-style words are the caller's; this is the (p − 1) / (m + p − 1) of 1F1B.
double pipeline_bubble(int stages, int micro_batches);

/// Young/Daly: √(2 × cost × MTBF), the interval that loses least to saves and redone work.
double young_daly_interval(double cost_seconds, double mtbf_seconds);

}  // namespace dtrain::plan
