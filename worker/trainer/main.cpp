// dtrain-train: the reference trainer. An MLP learns a fixed random teacher's labels on
// synthetic data, in the plan's hybrid layout (tensor × pipeline × data parallel, see
// layout.h and pipeline.h), with checkpoints and heartbeats through libdtrain_worker. Same
// global batch ⇒ the same loss curve for any layout, up to float summation order.
#include <malloc.h>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "worker/runtime/worker.h"
#include "worker/trainer/data.h"
#include "worker/trainer/layout.h"
#include "worker/trainer/model.h"
#include "worker/trainer/optimizer.h"
#include "worker/trainer/options.h"
#include "worker/trainer/pipeline.h"
#include "worker/trainer/staging.h"
#include "worker/trainer/train_state.h"

namespace dtrain::trainer {
namespace {

using worker::Millis;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// How the global batch is split: each DP rank takes global/dp consecutive sample indices of
/// every global batch, in `accum` micro-batches of `micro` (the pipeline's micro-batches).
struct BatchPlan {
  int global = 0;
  int micro = 0;
  int accum = 0;
  bool derived = false;  ///< neither the spec nor --global-batch chose it
};

constexpr int kDefaultGlobalBatch = 64;

worker::Result<BatchPlan> plan_batch(const Options& options, const worker::Settings& settings, int dp_size) {
  BatchPlan plan;
  plan.micro = settings.micro_batch > 0 ? settings.micro_batch : options.micro_batch;
  int per_step = dp_size * plan.micro;
  if (settings.global_batch > 0 || options.global_batch > 0) {
    plan.global = settings.global_batch > 0 ? settings.global_batch : options.global_batch;
    // The plan's grad_accum counts only when the spec set the batch (else it says 1).
    plan.accum = settings.global_batch > 0 && settings.grad_accum > 0 ? settings.grad_accum : plan.global / per_step;
  } else {
    // No batch anywhere: the multiple of data x micro nearest the default, so that any
    // number of ranks runs (64 does not split over 3 replicas of 8).
    plan.accum = std::max(1, (kDefaultGlobalBatch + per_step / 2) / per_step);
    plan.global = per_step * plan.accum;
    plan.derived = true;
  }
  if (plan.accum < 1 || static_cast<int64_t>(per_step) * plan.accum != plan.global) {
    return worker::Error{"dtrain-train: global batch " + std::to_string(plan.global) + " is not data-parallel size " +
                         std::to_string(dp_size) + " x micro batch " + std::to_string(plan.micro) +
                         " x grad accumulation " + std::to_string(plan.accum) +
                         "; choose batch.global (or --global-batch) as a multiple of dp x batch.micro = " +
                         std::to_string(per_step)};
  }
  return plan;
}

void abort_groups(worker::ParallelGroups* groups) {
  if (groups == nullptr) return;
  for (auto* comm : {groups->tensor.get(), groups->pipeline.get(), groups->data.get()}) {
    if (comm != nullptr) comm->abort();
  }
}

int fail(worker::Worker& worker, worker::ParallelGroups* groups, const std::string& message) {
  std::fprintf(stderr, "dtrain-train: rank %d: %s\n", worker.topology().rank, message.c_str());
  abort_groups(groups);
  worker.bye("error");
  return 1;
}

/// Why a checkpoint could not be restored when it was written at another tensor or pipeline
/// size: shard tp0-pp0 exists in every layout and records its layout. nullopt when that is not
/// the reason (restore()'s own error says what is).
std::optional<worker::Error> refuse_other_layout(const std::string& dir, int64_t resume_step,
                                                 const ModelLayout& layout) {
  if (dir.empty()) return std::nullopt;
  std::optional<int64_t> step = resume_step >= 0 ? std::optional<int64_t>(resume_step) : worker::latest_complete(dir).latest;
  if (!step) return std::nullopt;
  worker::Result<std::string> payload = worker::read_shard(dir, *step, 0, 0);
  if (!payload) return std::nullopt;
  worker::Result<TrainState> saved = decode_state(*payload, layout.widths);
  if (!saved) return std::nullopt;
  return layout_refusal(*saved, layout.tensor, layout.pipeline, *step, dir);
}

/// DTRAIN_FAULT_SLOW_RANK=<rank>:<ms>: that rank works <ms> longer on every step (before its
/// gradients are reduced, so the others wait for it in the all-reduce): the straggler drill.
/// 0 for every other rank, or when unset or malformed.
int slow_rank_delay_ms(int rank) {
  const char* value = std::getenv("DTRAIN_FAULT_SLOW_RANK");
  int slow_rank = -1, delay_ms = 0;
  if (!value || std::sscanf(value, "%d:%d", &slow_rank, &delay_ms) != 2 || slow_rank != rank) return 0;
  return std::max(0, delay_ms);
}

/// Mean timings over the steps after the first (which includes connection warm-up).
struct TimingTotals {
  int steps = 0;
  double step_ms = 0, pipeline_ms = 0, pipeline_wait_ms = 0, tensor_ms = 0, data_parallel_ms = 0;
};

void print_timing(const TimingTotals& totals, const worker::Topology& topology, const BatchPlan& batch) {
  if (totals.steps == 0) return;
  double n = totals.steps;
  std::printf("dtrain-train: timing over %d steps: step %.2f ms, %.0f samples/s; per step: pipeline wait %.2f ms, "
              "tensor allreduce %.2f ms, data-parallel allreduce %.2f ms\n",
              totals.steps, totals.step_ms / n, batch.global * 1000.0 / (totals.step_ms / n),
              totals.pipeline_wait_ms / n, totals.tensor_ms / n, totals.data_parallel_ms / n);
  if (topology.pp_size > 1) {
    int p = topology.pp_size, m = batch.accum;
    std::printf("dtrain-train: pipeline stage %d of %d: idle %.1f%% of the schedule (1F1B bubble (p-1)/(m+p-1) = "
                "%d/%d = %.1f%%)\n",
                topology.pp_rank, p, 100.0 * totals.pipeline_wait_ms / totals.pipeline_ms, p - 1, m + p - 1,
                100.0 * (p - 1) / (m + p - 1));
  }
}

int run(const Options& options) {
  auto created = worker::Worker::from_env(options.standalone);
  if (!created) {
    std::fprintf(stderr, "dtrain-train: %s\n", created.error().message.c_str());
    return 2;
  }
  worker::Worker& worker = **created;
  const worker::Topology& topology = worker.topology();
  const worker::Settings& settings = worker.settings();
  auto batch = plan_batch(options, settings, topology.dp_size);
  std::vector<int> widths{options.inputs};
  for (int l = 0; l < options.layers; ++l) widths.push_back(options.hidden);
  widths.push_back(options.classes);
  auto layout = plan_model(widths, topology.tp_size, topology.pp_size);
  if (!batch || !layout) {
    std::fprintf(stderr, "%s\n", (!batch ? batch.error() : layout.error()).message.c_str());
    worker.bye("error");
    return 2;
  }
  if (batch->derived && topology.rank == 0) {
    std::printf("dtrain-train: no batch in the spec or flags: global batch %d = data %d x micro %d x accum %d "
                "(the multiple of data x micro nearest %d; set batch.global to choose)\n",
                batch->global, topology.dp_size, batch->micro, batch->accum, kDefaultGlobalBatch);
    std::fflush(stdout);
  }
  Millis timeout(options.comm_timeout_ms);
  auto connected = worker.connect_groups(timeout);
  if (!connected) return fail(worker, nullptr, connected.error().message);
  worker::ParallelGroups& groups = *connected;

  MlpShard model(*layout, topology.pp_rank, topology.tp_rank, options.seed);
  SgdMomentum optimizer(model.parameter_count(), options.lr, options.momentum);
  SyntheticData data(options.inputs, options.classes, options.data_seed);

  worker::CheckpointOptions ckpt_options = worker::checkpoint_options(settings);
  if (ckpt_options.dir.empty()) ckpt_options.dir = options.ckpt_dir;
  ckpt_options.async = options.ckpt_async;
  int ckpt_interval = settings.ckpt_interval > 0 ? settings.ckpt_interval : options.ckpt_interval;
  worker::Checkpointer checkpointer(worker, ckpt_options);

  int64_t first_step = 1;
  auto restored = checkpointer.restore(settings.resume_step);
  if (!restored) {
    // A rank whose (tp, pp) shard the checkpoint lacks fails here: say so when the layout is why.
    if (auto refusal = refuse_other_layout(ckpt_options.dir, settings.resume_step, *layout)) {
      return fail(worker, &groups, refusal->message);
    }
    return fail(worker, &groups, restored.error().message);
  }
  if (restored->has_value()) {
    std::string where = "checkpoint step-" + std::to_string((*restored)->step);
    auto state = decode_state((*restored)->payload, widths);
    if (!state) return fail(worker, &groups, where + ": " + state.error().message);
    if (auto refusal = layout_refusal(*state, layout->tensor, layout->pipeline, (*restored)->step, ckpt_options.dir)) {
      return fail(worker, &groups, refusal->message);
    }
    if (state->tp_rank != topology.tp_rank || state->pp_rank != topology.pp_rank ||
        state->params.size() != model.parameter_count()) {
      return fail(worker, &groups, where + ": shard of tp " + std::to_string(state->tp_rank) + " pp " +
                                       std::to_string(state->pp_rank) + " with " + std::to_string(state->params.size()) +
                                       " parameters, expected tp " + std::to_string(topology.tp_rank) + " pp " +
                                       std::to_string(topology.pp_rank) + " with " +
                                       std::to_string(model.parameter_count()) + " (misplaced shard?)");
    }
    model.params() = std::move(state->params);
    optimizer.velocity() = std::move(state->velocity);
    first_step = state->step + 1;
    std::printf("dtrain-train: resumed from checkpoint step-%" PRId64 " in %s\n", state->step, ckpt_options.dir.c_str());
  }
  size_t count = model.parameter_count();
  size_t activations = static_cast<size_t>(batch->micro) * std::max(options.hidden, std::max(options.inputs, options.classes));
  auto data_staging = Staging::create(*groups.data, (count + 1) * sizeof(double));
  auto tensor_staging = Staging::create(*groups.tensor, activations * sizeof(double));
  auto pipeline_staging = Staging::create(*groups.pipeline, PipelineStep::max_message(*layout, batch->micro) * sizeof(double));
  for (auto* staging : {&data_staging, &tensor_staging, &pipeline_staging}) {
    if (!*staging) return fail(worker, &groups, staging->error().message);
  }
  // The replicas of a shard computed or loaded the same parameters; broadcasting replica 0's
  // makes that a fact.
  if (auto sent = (*data_staging)->broadcast(model.params().data(), count * sizeof(float), 0, timeout); !sent) {
    return fail(worker, &groups, sent.error().message);
  }
  const char* backend = "solo";  // the groups' back end: any of them that is not a group of one
  for (auto* comm : {groups.data.get(), groups.pipeline.get(), groups.tensor.get()}) {
    if (std::string(comm->backend()) != "solo") backend = comm->backend();
  }
  if (topology.rank == 0) {
    std::printf("dtrain-train: world %d (dp %d x pp %d x tp %d), backend %s, global batch %d = %d x micro %d x accum %d, "
                "%zu parameters on rank 0; %s\n",
                topology.world_size, topology.dp_size, topology.pp_size, topology.tp_size, backend,
                batch->global, topology.dp_size, batch->micro, batch->accum, count, layout->describe().c_str());
  }
  std::fflush(stdout);

  PipelineStep pipeline(model, *layout, topology, **pipeline_staging, **tensor_staging, data, batch->micro,
                        batch->accum, timeout);
  // Two slots after the gradients, reduced with them: the batch's loss sum, and how many ranks
  // have heard a checkpoint request by this step.
  std::vector<double> grad(count + 2);
  double loss = 0;
  TimingTotals totals;
  const int slow_ms = slow_rank_delay_ms(topology.rank);
  for (int64_t step = first_step; step <= options.steps; ++step) {
    Clock::time_point started = Clock::now();
    std::fill(grad.begin(), grad.end(), 0.0);
    StepTimes times;
    uint64_t first_sample = static_cast<uint64_t>(step - 1) * batch->global +
                            static_cast<uint64_t>(topology.dp_rank) * (batch->global / topology.dp_size);
    if (auto ran = pipeline.run(first_sample, grad.data(), times); !ran) {
      return fail(worker, &groups, "step " + std::to_string(step) + ": " + ran.error().message);
    }
    if (slow_ms > 0) std::this_thread::sleep_for(Millis(slow_ms));
    double pipeline_ms = ms_since(started);
    // Slurm's time limit is near (ckpt.request). The request reaches the ranks at different
    // moments (each through its own agent, each at its own next look), and one that hears it a
    // step late would save a different step: no checkpoint would be complete, and rank 0 would
    // wait for the missing shards. The first step at which any rank of the group has heard it
    // is the one they all save.
    grad[count + 1] = worker.checkpoint_requested(step) ? 1.0 : 0.0;
    Clock::time_point reduce = Clock::now();
    if (auto reduced = (*data_staging)->allreduce_sum(grad.data(), grad.size(), timeout); !reduced) {
      return fail(worker, &groups, "step " + std::to_string(step) + ": " + reduced.error().message);
    }
    double data_parallel_ms = ms_since(reduce);
    for (double& value : grad) value /= batch->global;
    loss = grad[count];
    const bool requested = grad[count + 1] > 0;
    if (requested) {
      worker.checkpoint_request_served(step);
      std::fprintf(stderr, "dtrain-train: saving step %" PRId64 " for a checkpoint request\n", step);
    }
    optimizer.step(model.params(), grad.data());
    double step_ms = ms_since(started);
    if (step > first_step) {
      totals.steps += 1;
      totals.step_ms += step_ms;
      totals.pipeline_ms += pipeline_ms;
      totals.pipeline_wait_ms += times.pipeline_wait_ms;
      totals.tensor_ms += times.tensor_ms;
      totals.data_parallel_ms += data_parallel_ms;
    }
    bool last = step == options.steps;
    double comm_ms = times.pipeline_wait_ms + times.tensor_ms + data_parallel_ms;
    worker.beat(step, {loss, step_ms, comm_ms, times.data_ms, batch->global}, last);
    if (options.log_every > 0 && (step % options.log_every == 0 || step == first_step || last)) {
      std::printf("step %" PRId64 " loss %.4f step_ms %.1f\n", step, loss, step_ms);
      std::fflush(stdout);
    }
    if (!ckpt_options.dir.empty() && ((ckpt_interval > 0 && step % ckpt_interval == 0) || requested)) {
      TrainState state{widths, topology.tp_size, topology.pp_size, topology.tp_rank, topology.pp_rank,
                       step, step * batch->global, model.params(), optimizer.velocity()};
      if (auto saved = checkpointer.save(step, encode_state(state)); !saved) {
        return fail(worker, &groups, saved.error().message);
      }
    }
  }
  if (auto saved = checkpointer.wait(); !saved) return fail(worker, &groups, saved.error().message);
  print_timing(totals, topology, *batch);
  std::printf("dtrain-train: final step=%d loss=%.15f checksum=%016" PRIx64 "\n", options.steps, loss, model.checksum());
  std::fflush(stdout);
  worker.bye("finished");
  return 0;
}

}  // namespace
}  // namespace dtrain::trainer

int main(int argc, char** argv) {
  // Keep freed memory in the process: each checkpoint snapshot is as large as the model, and
  // glibc's default hands such blocks back to the kernel (mmap/trim), so every save page-faulted
  // a fresh copy in on the training thread (200-460 ms at 25 MB; with these settings and the one-allocation encode_state, 4 ms: 2.0 % of a step with --ckpt-async, scripts/bench/checkpoint.sh --stall).
  ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = dtrain::trainer::parse_options(args);
  if (!options) {
    std::fprintf(stderr, "%s\n", options.error().message.c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(dtrain::trainer::usage(), stdout);
    return 0;
  }
  try {
    return dtrain::trainer::run(*options);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "dtrain-train: internal bug: uncaught exception: %s\n", failure.what());
    return 70;
  }
}
