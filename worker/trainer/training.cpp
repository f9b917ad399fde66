#include "worker/trainer/training.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/trainer/data.h"
#include "worker/trainer/layout.h"
#include "worker/trainer/live_recovery.h"
#include "worker/trainer/model.h"
#include "worker/trainer/optimizer.h"
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

/// "42": whole milliseconds from `from` to `to`, for the rejoin line's phases.
std::string whole_ms(Clock::time_point from, Clock::time_point to) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
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

/// The communicators of one generation and everything built on them. Destroyed as a whole: a
/// Gloo communicator closes its sockets when destroyed, which is how the peers still blocked in
/// a collective with this rank learn that it left (in-place recovery relies on it).
struct Links {
  worker::ParallelGroups groups;
  std::unique_ptr<Staging> data, tensor, pipeline;
  std::unique_ptr<PipelineStep> step;
  std::thread retiring;  // destroying the communicators retire() left

  ~Links() { close(); }

  void close() {
    release_step();
    abort_groups();
    groups = worker::ParallelGroups{};
    if (retiring.joinable()) retiring.join();
  }

  /// In-place recovery: the same, but Gloo communicators are destroyed on another thread.
  /// Destroying a Gloo context waits for its device thread to tick (up to 10 ms) for each
  /// connection and again to stop it: 8-24 ms measured per rejoin, on the recovery's critical
  /// path otherwise. The peers learn that this rank left when its sockets close there, or from
  /// their own gen.changed, whichever is first. NCCL ones are destroyed here: their CUDA stream
  /// and memory belong to the device this thread set.
  void retire() {
    for (auto* comm : {groups.tensor.get(), groups.pipeline.get(), groups.data.get()}) {
      if (comm != nullptr && std::string(comm->backend()) == "nccl") return close();
    }
    release_step();
    abort_groups();
    if (retiring.joinable()) retiring.join();
    retiring = std::thread([old = std::move(groups)]() mutable { old = worker::ParallelGroups{}; });
    groups = worker::ParallelGroups{};
  }

 private:
  void release_step() {
    step.reset();
    data.reset();
    tensor.reset();
    pipeline.reset();
  }
  void abort_groups() {
    for (auto* comm : {groups.tensor.get(), groups.pipeline.get(), groups.data.get()}) {
      if (comm != nullptr) comm->abort();  // NCCL: ncclCommAbort; Gloo: the destructor closes
    }
  }
};

int fail(worker::Worker& worker, Links& links, const std::string& message) {
  std::fprintf(stderr, "dtrain-train: rank %d: %s\n", worker.topology().rank, message.c_str());
  links.close();
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
  double step_ms = 0, pipeline_ms = 0, pipeline_wait_ms = 0, tensor_ms = 0, data_parallel_ms = 0, keep_ms = 0;
};

void print_timing(const TimingTotals& totals, const worker::Topology& topology, const BatchPlan& batch,
                  bool in_place) {
  if (totals.steps == 0) return;
  double n = totals.steps;
  std::printf("dtrain-train: timing over %d steps: step %.2f ms, %.0f samples/s; per step: pipeline wait %.2f ms, "
              "tensor allreduce %.2f ms, data-parallel allreduce %.2f ms\n",
              totals.steps, totals.step_ms / n, batch.global * 1000.0 / (totals.step_ms / n),
              totals.pipeline_wait_ms / n, totals.tensor_ms / n, totals.data_parallel_ms / n);
  if (in_place) {
    std::printf("dtrain-train: in-place recovery: keeping the pre-step state costs %.4f ms per step (%.2f%% of a "
                "step)\n",
                totals.keep_ms / n, 100.0 * totals.keep_ms / totals.step_ms);
  }
  if (topology.pp_size > 1) {
    int p = topology.pp_size, m = batch.accum;
    std::printf("dtrain-train: pipeline stage %d of %d: idle %.1f%% of the schedule (1F1B bubble (p-1)/(m+p-1) = "
                "%d/%d = %.1f%%)\n",
                topology.pp_rank, p, 100.0 * totals.pipeline_wait_ms / totals.pipeline_ms, p - 1, m + p - 1,
                100.0 * (p - 1) / (m + p - 1));
  }
}

}  // namespace

int train(worker::Worker& worker, const Options& options, const TrainingHooks& hooks, TrainingOutcome* outcome) {
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
  const Millis timeout(options.comm_timeout_ms);
  // With DTRAIN_IN_PLACE=1 a failed collective is not the end: see recover() below.
  const bool in_place = settings.in_place;
  const Millis rejoin_timeout(settings.in_place_timeout_ms);
  Clock::time_point started = Clock::now();

  MlpShard model(*layout, topology.pp_rank, topology.tp_rank, options.seed);
  SgdMomentum optimizer(model.parameter_count(), options.lr, options.momentum);
  SyntheticData data(options.inputs, options.classes, options.data_seed);
  size_t count = model.parameter_count();
  size_t activations = static_cast<size_t>(batch->micro) * std::max(options.hidden, std::max(options.inputs, options.classes));

  Links links;
  // Connects this generation's groups and builds the step on them.
  auto link = [&](Millis connect_timeout) -> worker::Status {
    auto connected = worker.connect_groups(connect_timeout);
    if (!connected) return connected.error();
    links.groups = std::move(*connected);
    auto data_staging = Staging::create(*links.groups.data, (count + 1) * sizeof(double));
    auto tensor_staging = Staging::create(*links.groups.tensor, activations * sizeof(double));
    auto pipeline_staging =
        Staging::create(*links.groups.pipeline, PipelineStep::max_message(*layout, batch->micro) * sizeof(double));
    for (auto* staging : {&data_staging, &tensor_staging, &pipeline_staging}) {
      if (!*staging) return staging->error();
    }
    links.data = std::move(*data_staging);
    links.tensor = std::move(*tensor_staging);
    links.pipeline = std::move(*pipeline_staging);
    links.step = std::make_unique<PipelineStep>(model, *layout, topology, *links.pipeline, *links.tensor, data,
                                                batch->micro, batch->accum, timeout);
    return {};
  };
  // A replacement (DTRAIN_JOIN_LIVE=1) joins survivors that wait for it up to their in-place
  // timeout: it waits as long for them.
  if (auto linked = link(settings.join_live ? std::max(timeout, rejoin_timeout) : timeout); !linked) {
    return fail(worker, links, linked.error().message);
  }

  worker::CheckpointOptions ckpt_options = worker::checkpoint_options(settings);
  if (ckpt_options.dir.empty()) ckpt_options.dir = options.ckpt_dir;
  ckpt_options.async = options.ckpt_async;
  int ckpt_interval = settings.ckpt_interval > 0 ? settings.ckpt_interval : options.ckpt_interval;
  worker::Checkpointer checkpointer(worker, ckpt_options);

  // The newest step whose optimizer update this rank holds (-1: none, a replacement).
  int64_t completed = 0;
  KeptState kept;
  int recoveries = 0, roll_backs = 0;
  // Checkpoint requests (ckpt.request) across an in-place recovery: see the step loop.
  bool request_owed = false;
  int64_t request_served_step = -1;
  // Every rank, survivors and replacement, agrees on the state; then the next step is the
  // agreed one's successor. `noticed` is when this rank started recovering; `phases` says
  // where the time before the agreement went.
  auto agree = [&](Clock::time_point noticed, const std::string& phases) -> worker::Status {
    Clock::time_point agreeing = Clock::now();
    auto agreed = agree_on_state(worker.kv(), topology, *links.data, completed, kept, model.params(),
                                 optimizer.velocity(), rejoin_timeout);
    if (!agreed) return agreed.error();
    if (agreed->roll_back) {
      std::fprintf(stderr, "dtrain-train: rank %d: rolled back from step %" PRId64 " to step %" PRId64
                   " (the kept pre-step state)\n", topology.rank, completed, agreed->step);
      roll_backs += 1;
    }
    completed = agreed->step;
    if (request_served_step > completed) request_owed = true;  // its save was rolled back
    recoveries += 1;
    std::fprintf(stderr,
                 "dtrain-train: rank %d: rejoined generation %d at step %" PRId64 " (state from rank %d, %.0f ms: %sstate %.0f)\n",
                 topology.rank, settings.generation, agreed->step, agreed->source_rank, ms_since(noticed),
                 phases.c_str(), ms_since(agreeing));
    return {};
  };

  if (settings.join_live) {
    // A replacement takes the state of a live replica, never a checkpoint on disk.
    completed = -1;
    std::string phases = "start and connect " + whole_ms(started, Clock::now()) + ", ";
    if (auto agreed = agree(started, phases); !agreed) return fail(worker, links, agreed.error().message);
  } else {
    auto restored = checkpointer.restore(settings.resume_step);
    if (!restored) {
      // A rank whose (tp, pp) shard the checkpoint lacks fails here: say so when the layout is why.
      if (auto refusal = refuse_other_layout(ckpt_options.dir, settings.resume_step, *layout)) {
        return fail(worker, links, refusal->message);
      }
      return fail(worker, links, restored.error().message);
    }
    if (restored->has_value()) {
      std::string where = "checkpoint step-" + std::to_string((*restored)->step);
      auto state = decode_state((*restored)->payload, widths);
      if (!state) return fail(worker, links, where + ": " + state.error().message);
      if (auto refusal = layout_refusal(*state, layout->tensor, layout->pipeline, (*restored)->step, ckpt_options.dir)) {
        return fail(worker, links, refusal->message);
      }
      if (state->tp_rank != topology.tp_rank || state->pp_rank != topology.pp_rank ||
          state->params.size() != model.parameter_count()) {
        return fail(worker, links, where + ": shard of tp " + std::to_string(state->tp_rank) + " pp " +
                                       std::to_string(state->pp_rank) + " with " + std::to_string(state->params.size()) +
                                       " parameters, expected tp " + std::to_string(topology.tp_rank) + " pp " +
                                       std::to_string(topology.pp_rank) + " with " +
                                       std::to_string(model.parameter_count()) + " (misplaced shard?)");
      }
      model.params() = std::move(state->params);
      optimizer.velocity() = std::move(state->velocity);
      completed = state->step;
      std::printf("dtrain-train: resumed from checkpoint step-%" PRId64 " in %s\n", state->step, ckpt_options.dir.c_str());
    }
    // The replicas of a shard computed or loaded the same parameters; broadcasting replica 0's
    // makes that a fact.
    if (auto sent = links.data->broadcast(model.params().data(), count * sizeof(float), 0, timeout); !sent) {
      return fail(worker, links, sent.error().message);
    }
  }
  const char* backend = "solo";  // the groups' back end: any of them that is not a group of one
  for (auto* comm : {links.groups.data.get(), links.groups.pipeline.get(), links.groups.tensor.get()}) {
    if (std::string(comm->backend()) != "solo") backend = comm->backend();
  }
  if (topology.rank == 0 && !settings.join_live) {
    std::printf("dtrain-train: world %d (dp %d x pp %d x tp %d), backend %s, global batch %d = %d x micro %d x accum %d, "
                "%zu parameters on rank 0; %s\n",
                topology.world_size, topology.dp_size, topology.pp_size, topology.tp_size, backend,
                batch->global, topology.dp_size, batch->micro, batch->accum, count, layout->describe().c_str());
  }
  std::fflush(stdout);

  // In-place recovery of a survivor: leave the generation (closing every communicator, which
  // makes the peers' collectives with this rank fail too), adopt the next one, connect again
  // and agree on the state. An error means the recovery is impossible: the caller exits and
  // the supervisor falls back to a full restart.
  auto recover = [&](const std::string& what_failed) -> worker::Status {
    Clock::time_point noticed = Clock::now();
    std::fprintf(stderr, "dtrain-train: rank %d: %s; waiting up to %d ms for the next generation (in-place recovery)\n",
                 topology.rank, what_failed.c_str(), settings.in_place_timeout_ms);
    links.retire();
    // A save in flight ends now (its kv.wait fails as the store moves on); its commit is
    // refused (gen.check) since this rank's generation is no longer the store's.
    if (auto saved = checkpointer.wait(); !saved) {
      std::fprintf(stderr, "dtrain-train: rank %d: the checkpoint save in flight was abandoned: %s\n", topology.rank,
                   saved.error().message.c_str());
    }
    Clock::time_point left = Clock::now();
    auto adopted = worker.adopt_new_generation(rejoin_timeout);
    if (!adopted) return worker::Error{"in-place recovery: " + adopted.error().message};
    Clock::time_point announced = Clock::now();
    if (auto linked = link(rejoin_timeout); !linked) {
      return worker::Error{"in-place recovery in generation " + std::to_string(*adopted) + ": " + linked.error().message};
    }
    return agree(noticed, "leave " + whole_ms(noticed, left) + ", wait for the generation " +
                              whole_ms(left, announced) + ", connect " + whole_ms(announced, Clock::now()) + ", ");
  };
  // A save that failed because the generation moved on is a recovery, not the end.
  auto save_failed_by_generation = [&]() {
    if (!in_place) return false;
    if (worker.generation_change()) return true;
    auto current = worker.kv().generation_is_current();
    return !current || !*current;
  };

  // Two slots after the gradients, reduced with them: the batch's loss sum, and how many ranks
  // have heard a checkpoint request by this step.
  std::vector<double> grad(count + 2);
  double loss = 0;
  TimingTotals totals;
  const int slow_ms = slow_rank_delay_ms(topology.rank);
  // The first step of a run, and of each rejoin, includes connection warm-up: not timed.
  int64_t untimed_step = completed + 1;
  for (int64_t step = completed + 1; step <= options.steps;) {
    // Every way out of a step with in_place: recover, then redo from the agreed step.
    auto failed = [&](const std::string& what) -> std::optional<int> {
      if (!in_place) return fail(worker, links, what);
      if (auto recovered = recover(what); !recovered) return fail(worker, links, recovered.error().message);
      step = completed + 1;
      untimed_step = step;
      return std::nullopt;
    };
    if (in_place) {
      if (std::optional<int> announced = worker.generation_change()) {
        if (auto exit = failed("generation " + std::to_string(*announced) + " was announced before step " +
                               std::to_string(step))) {
          return *exit;
        }
        continue;
      }
    }
    Clock::time_point step_started = Clock::now();
    std::fill(grad.begin(), grad.end(), 0.0);
    StepTimes times;
    uint64_t first_sample = static_cast<uint64_t>(step - 1) * batch->global +
                            static_cast<uint64_t>(topology.dp_rank) * (batch->global / topology.dp_size);
    if (auto ran = links.step->run(first_sample, grad.data(), times); !ran) {
      if (auto exit = failed("step " + std::to_string(step) + ": " + ran.error().message)) return *exit;
      continue;
    }
    if (hooks.die_before_reduce && hooks.die_before_reduce(step)) {
      links.close();
      return kKilledByHook;
    }
    if (slow_ms > 0) std::this_thread::sleep_for(Millis(slow_ms));
    double pipeline_ms = ms_since(step_started);
    // Slurm's time limit is near (ckpt.request). The request reaches the ranks at different
    // moments (each through its own agent, each at its own next look), and one that hears it a
    // step late would save a different step: no checkpoint would be complete, and rank 0 would
    // wait for the missing shards. The first step at which any rank of the group has heard it
    // is the one they all save.
    // A request heard in a step that a failure abandoned, or saved in a step that the recovery
    // rolled back, is still owed: it rides again with the redone step.
    if (worker.checkpoint_requested(step)) request_owed = true;
    grad[count + 1] = request_owed ? 1.0 : 0.0;
    Clock::time_point reduce = Clock::now();
    if (auto reduced = links.data->allreduce_sum(grad.data(), grad.size(), timeout); !reduced) {
      if (auto exit = failed("step " + std::to_string(step) + ": " + reduced.error().message)) return *exit;
      continue;
    }
    double data_parallel_ms = ms_since(reduce);
    for (double& value : grad) value /= batch->global;
    loss = grad[count];
    const bool requested = grad[count + 1] > 0;
    if (requested) {
      request_owed = false;
      request_served_step = step;
      worker.checkpoint_request_served(step);
      std::fprintf(stderr, "dtrain-train: saving step %" PRId64 " for a checkpoint request\n", step);
    }
    double keep_ms = 0;
    if (in_place) {
      // What a roll-back to `completed` needs if a peer fails before completing this step.
      Clock::time_point keeping = Clock::now();
      kept.keep(completed, model.params(), optimizer.velocity());
      keep_ms = ms_since(keeping);
    }
    optimizer.step(model.params(), grad.data());
    completed = step;
    double step_ms = ms_since(step_started);
    if (step > untimed_step) {
      totals.steps += 1;
      totals.step_ms += step_ms;
      totals.pipeline_ms += pipeline_ms;
      totals.pipeline_wait_ms += times.pipeline_wait_ms;
      totals.tensor_ms += times.tensor_ms;
      totals.data_parallel_ms += data_parallel_ms;
      totals.keep_ms += keep_ms;
    }
    bool last = step == options.steps;
    double comm_ms = times.pipeline_wait_ms + times.tensor_ms + data_parallel_ms;
    worker.beat(step, {loss, step_ms, comm_ms, times.data_ms, batch->global}, last);
    if (options.log_every > 0 && (step % options.log_every == 0 || step == untimed_step || last)) {
      std::printf("step %" PRId64 " loss %.4f step_ms %.1f\n", step, loss, step_ms);
      std::fflush(stdout);
    }
    if (!ckpt_options.dir.empty() && ((ckpt_interval > 0 && step % ckpt_interval == 0) || requested)) {
      TrainState state{widths, topology.tp_size, topology.pp_size, topology.tp_rank, topology.pp_rank,
                       step, step * batch->global, model.params(), optimizer.velocity()};
      if (auto saved = checkpointer.save(step, encode_state(state)); !saved) {
        if (!save_failed_by_generation()) return fail(worker, links, saved.error().message);
        // The step itself completed: recovery continues from it (or rolls it back).
        if (auto exit = failed(saved.error().message)) return *exit;
        continue;
      }
    }
    ++step;
  }
  if (auto saved = checkpointer.wait(); !saved) return fail(worker, links, saved.error().message);
  print_timing(totals, topology, *batch, in_place);
  std::printf("dtrain-train: final step=%d loss=%.15f checksum=%016" PRIx64 "\n", options.steps, loss, model.checksum());
  std::fflush(stdout);
  if (outcome != nullptr) *outcome = {options.steps, loss, model.checksum(), recoveries, roll_backs};
  worker.bye("finished");
  return 0;
}

}  // namespace dtrain::trainer
