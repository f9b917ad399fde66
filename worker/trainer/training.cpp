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

/// One rank's training run: the state the step loop carries (the model and its optimizer, the
/// generation's links, the newest completed step, what an in-place recovery keeps and owes),
/// and the phases train() walks through: connect, take the initial state (checkpoint or a live
/// replica), then steps until the last, recovering in place where the job allows it. Every
/// phase that can end the run returns its exit status; nullopt goes on.
class TrainingRun {
 public:
  TrainingRun(worker::Worker& worker, const Options& options, const TrainingHooks& hooks, const BatchPlan& batch,
              std::vector<int> widths, const ModelLayout& layout)
      : worker_(worker),
        options_(options),
        hooks_(hooks),
        topology_(worker.topology()),
        settings_(worker.settings()),
        batch_(batch),
        widths_(std::move(widths)),
        layout_(layout),
        timeout_(options.comm_timeout_ms),
        in_place_(settings_.in_place),
        rejoin_timeout_(settings_.in_place_timeout_ms),
        model_(layout_, topology_.pp_rank, topology_.tp_rank, options.seed),
        optimizer_(model_.parameter_count(), options.lr, options.momentum),
        data_(options.inputs, options.classes, options.data_seed),
        count_(model_.parameter_count()),
        activations_(static_cast<size_t>(batch.micro) *
                     std::max(options.hidden, std::max(options.inputs, options.classes))),
        ckpt_options_(checkpoint_settings(settings_, options)),
        ckpt_interval_(settings_.ckpt_interval > 0 ? settings_.ckpt_interval : options.ckpt_interval),
        checkpointer_(worker, ckpt_options_),
        grad_(count_ + 2),
        slow_ms_(slow_rank_delay_ms(topology_.rank)) {}

  int run(TrainingOutcome* outcome) {
    // A replacement (DTRAIN_JOIN_LIVE=1) joins survivors that wait for it up to their in-place
    // timeout: it waits as long for them.
    if (auto linked = link(settings_.join_live ? std::max(timeout_, rejoin_timeout_) : timeout_); !linked) {
      return fail(worker_, links_, linked.error().message);
    }
    if (auto exit = take_initial_state()) return *exit;
    announce();
    untimed_step_ = completed_ + 1;
    for (step_ = completed_ + 1; step_ <= options_.steps;) {
      if (auto exit = run_step()) return *exit;
    }
    if (auto saved = checkpointer_.wait(); !saved) return fail(worker_, links_, saved.error().message);
    print_timing(totals_, topology_, batch_, in_place_);
    std::printf("dtrain-train: final step=%d loss=%.15f checksum=%016" PRIx64 "\n", options_.steps, loss_,
                model_.checksum());
    std::fflush(stdout);
    if (outcome != nullptr) *outcome = {options_.steps, loss_, model_.checksum(), recoveries_, roll_backs_};
    worker_.bye("finished");
    return 0;
  }

 private:
  static worker::CheckpointOptions checkpoint_settings(const worker::Settings& settings, const Options& options) {
    worker::CheckpointOptions ckpt = worker::checkpoint_options(settings);
    if (ckpt.dir.empty()) ckpt.dir = options.ckpt_dir;
    ckpt.async = options.ckpt_async;
    return ckpt;
  }

  /// Connects this generation's groups and builds the step on them.
  worker::Status link(Millis connect_timeout) {
    auto connected = worker_.connect_groups(connect_timeout);
    if (!connected) return connected.error();
    links_.groups = std::move(*connected);
    auto data_staging = Staging::create(*links_.groups.data, (count_ + 1) * sizeof(double));
    auto tensor_staging = Staging::create(*links_.groups.tensor, activations_ * sizeof(double));
    auto pipeline_staging =
        Staging::create(*links_.groups.pipeline, PipelineStep::max_message(layout_, batch_.micro) * sizeof(double));
    for (auto* staging : {&data_staging, &tensor_staging, &pipeline_staging}) {
      if (!*staging) return staging->error();
    }
    links_.data = std::move(*data_staging);
    links_.tensor = std::move(*tensor_staging);
    links_.pipeline = std::move(*pipeline_staging);
    links_.step = std::make_unique<PipelineStep>(model_, layout_, topology_, *links_.pipeline, *links_.tensor, data_,
                                                 batch_.micro, batch_.accum, timeout_);
    return {};
  }

  /// A replacement takes the state of a live replica, never a checkpoint on disk; every other
  /// rank the newest checkpoint (if any), then replica 0's parameters.
  std::optional<int> take_initial_state() {
    if (settings_.join_live) {
      completed_ = -1;
      std::string phases = "start and connect " + whole_ms(started_, Clock::now()) + ", ";
      if (auto agreed = agree(started_, phases); !agreed) return fail(worker_, links_, agreed.error().message);
      return std::nullopt;
    }
    if (auto exit = restore_checkpoint()) return exit;
    // The replicas of a shard computed or loaded the same parameters; broadcasting replica 0's
    // makes that a fact.
    if (auto sent = links_.data->broadcast(model_.params().data(), count_ * sizeof(float), 0, timeout_); !sent) {
      return fail(worker_, links_, sent.error().message);
    }
    return std::nullopt;
  }

  std::optional<int> restore_checkpoint() {
    auto restored = checkpointer_.restore(settings_.resume_step);
    if (!restored) {
      // A rank whose (tp, pp) shard the checkpoint lacks fails here: say so when the layout is why.
      if (auto refusal = refuse_other_layout(ckpt_options_.dir, settings_.resume_step, layout_)) {
        return fail(worker_, links_, refusal->message);
      }
      return fail(worker_, links_, restored.error().message);
    }
    if (!restored->has_value()) return std::nullopt;
    std::string where = "checkpoint step-" + std::to_string((*restored)->step);
    auto state = decode_state((*restored)->payload, widths_);
    if (!state) return fail(worker_, links_, where + ": " + state.error().message);
    if (auto refusal = layout_refusal(*state, layout_.tensor, layout_.pipeline, (*restored)->step, ckpt_options_.dir)) {
      return fail(worker_, links_, refusal->message);
    }
    if (state->tp_rank != topology_.tp_rank || state->pp_rank != topology_.pp_rank ||
        state->params.size() != model_.parameter_count()) {
      return fail(worker_, links_, where + ": shard of tp " + std::to_string(state->tp_rank) + " pp " +
                                       std::to_string(state->pp_rank) + " with " + std::to_string(state->params.size()) +
                                       " parameters, expected tp " + std::to_string(topology_.tp_rank) + " pp " +
                                       std::to_string(topology_.pp_rank) + " with " +
                                       std::to_string(model_.parameter_count()) + " (misplaced shard?)");
    }
    model_.params() = std::move(state->params);
    optimizer_.velocity() = std::move(state->velocity);
    completed_ = state->step;
    std::printf("dtrain-train: resumed from checkpoint step-%" PRId64 " in %s\n", state->step, ckpt_options_.dir.c_str());
    return std::nullopt;
  }

  /// Rank 0's line about the world it trains in (not a replacement's: it joins a running world).
  void announce() {
    const char* backend = "solo";  // the groups' back end: any of them that is not a group of one
    for (auto* comm : {links_.groups.data.get(), links_.groups.pipeline.get(), links_.groups.tensor.get()}) {
      if (std::string(comm->backend()) != "solo") backend = comm->backend();
    }
    if (topology_.rank == 0 && !settings_.join_live) {
      std::printf("dtrain-train: world %d (dp %d x pp %d x tp %d), backend %s, global batch %d = %d x micro %d x accum %d, "
                  "%zu parameters on rank 0; %s\n",
                  topology_.world_size, topology_.dp_size, topology_.pp_size, topology_.tp_size, backend,
                  batch_.global, topology_.dp_size, batch_.micro, batch_.accum, count_, layout_.describe().c_str());
    }
    std::fflush(stdout);
  }

  /// Every rank, survivors and replacement, agrees on the state; then the next step is the
  /// agreed one's successor. `noticed` is when this rank started recovering; `phases` says
  /// where the time before the agreement went.
  worker::Status agree(Clock::time_point noticed, const std::string& phases) {
    Clock::time_point agreeing = Clock::now();
    auto agreed = agree_on_state(worker_.kv(), topology_, *links_.data, completed_, kept_, model_.params(),
                                 optimizer_.velocity(), rejoin_timeout_);
    if (!agreed) return agreed.error();
    if (agreed->roll_back) {
      std::fprintf(stderr, "dtrain-train: rank %d: rolled back from step %" PRId64 " to step %" PRId64
                   " (the kept pre-step state)\n", topology_.rank, completed_, agreed->step);
      roll_backs_ += 1;
    }
    completed_ = agreed->step;
    if (request_served_step_ > completed_) request_owed_ = true;  // its save was rolled back
    recoveries_ += 1;
    std::fprintf(stderr,
                 "dtrain-train: rank %d: rejoined generation %d at step %" PRId64 " (state from rank %d, %.0f ms: %sstate %.0f)\n",
                 topology_.rank, settings_.generation, agreed->step, agreed->source_rank, ms_since(noticed),
                 phases.c_str(), ms_since(agreeing));
    return {};
  }

  /// In-place recovery of a survivor: leave the generation (closing every communicator, which
  /// makes the peers' collectives with this rank fail too), adopt the next one, connect again
  /// and agree on the state. An error means the recovery is impossible: the caller exits and
  /// the supervisor falls back to a full restart.
  worker::Status recover(const std::string& what_failed) {
    Clock::time_point noticed = Clock::now();
    std::fprintf(stderr, "dtrain-train: rank %d: %s; waiting up to %d ms for the next generation (in-place recovery)\n",
                 topology_.rank, what_failed.c_str(), settings_.in_place_timeout_ms);
    links_.retire();
    // A save in flight ends now (its kv.wait fails as the store moves on); its commit is
    // refused (gen.check) since this rank's generation is no longer the store's.
    if (auto saved = checkpointer_.wait(); !saved) {
      std::fprintf(stderr, "dtrain-train: rank %d: the checkpoint save in flight was abandoned: %s\n", topology_.rank,
                   saved.error().message.c_str());
    }
    Clock::time_point left = Clock::now();
    auto adopted = worker_.adopt_new_generation(rejoin_timeout_);
    if (!adopted) return worker::Error{"in-place recovery: " + adopted.error().message};
    Clock::time_point announced = Clock::now();
    if (auto linked = link(rejoin_timeout_); !linked) {
      return worker::Error{"in-place recovery in generation " + std::to_string(*adopted) + ": " + linked.error().message};
    }
    return agree(noticed, "leave " + whole_ms(noticed, left) + ", wait for the generation " +
                              whole_ms(left, announced) + ", connect " + whole_ms(announced, Clock::now()) + ", ");
  }

  /// Every way out of a step with in_place: recover, then redo from the agreed step.
  std::optional<int> failed(const std::string& what) {
    if (!in_place_) return fail(worker_, links_, what);
    if (auto recovered = recover(what); !recovered) return fail(worker_, links_, recovered.error().message);
    step_ = completed_ + 1;
    untimed_step_ = step_;
    return std::nullopt;
  }

  /// A save that failed because the generation moved on is a recovery, not the end.
  bool save_failed_by_generation() {
    if (!in_place_) return false;
    if (worker_.generation_change()) return true;
    auto current = worker_.kv().generation_is_current();
    return !current || !*current;
  }

  /// Step `step_`: forward and backward, the data-parallel reduce, the update, the beat and a
  /// checkpoint when due. Advances step_, or (after a recovery) sets it to redo a step.
  std::optional<int> run_step() {
    if (in_place_) {
      if (std::optional<int> announced = worker_.generation_change()) {
        return failed("generation " + std::to_string(*announced) + " was announced before step " +
                      std::to_string(step_));
      }
    }
    Clock::time_point step_started = Clock::now();
    std::fill(grad_.begin(), grad_.end(), 0.0);
    StepTimes times;
    uint64_t first_sample = static_cast<uint64_t>(step_ - 1) * batch_.global +
                            static_cast<uint64_t>(topology_.dp_rank) * (batch_.global / topology_.dp_size);
    if (auto ran = links_.step->run(first_sample, grad_.data(), times); !ran) {
      return failed("step " + std::to_string(step_) + ": " + ran.error().message);
    }
    if (hooks_.die_before_reduce && hooks_.die_before_reduce(step_)) {
      links_.close();
      return kKilledByHook;
    }
    if (slow_ms_ > 0) std::this_thread::sleep_for(Millis(slow_ms_));
    double pipeline_ms = ms_since(step_started);
    // Slurm's time limit is near (ckpt.request). The request reaches the ranks at different
    // moments (each through its own agent, each at its own next look), and one that hears it a
    // step late would save a different step: no checkpoint would be complete, and rank 0 would
    // wait for the missing shards. The first step at which any rank of the group has heard it
    // is the one they all save.
    // A request heard in a step that a failure abandoned, or saved in a step that the recovery
    // rolled back, is still owed: it rides again with the redone step.
    if (worker_.checkpoint_requested(step_)) request_owed_ = true;
    grad_[count_ + 1] = request_owed_ ? 1.0 : 0.0;
    Clock::time_point reduce = Clock::now();
    if (auto reduced = links_.data->allreduce_sum(grad_.data(), grad_.size(), timeout_); !reduced) {
      return failed("step " + std::to_string(step_) + ": " + reduced.error().message);
    }
    double data_parallel_ms = ms_since(reduce);
    for (double& value : grad_) value /= batch_.global;
    loss_ = grad_[count_];
    const bool requested = grad_[count_ + 1] > 0;
    if (requested) {
      request_owed_ = false;
      request_served_step_ = step_;
      worker_.checkpoint_request_served(step_);
      std::fprintf(stderr, "dtrain-train: saving step %" PRId64 " for a checkpoint request\n", step_);
    }
    double keep_ms = update();
    double step_ms = ms_since(step_started);
    if (step_ > untimed_step_) {
      totals_.steps += 1;
      totals_.step_ms += step_ms;
      totals_.pipeline_ms += pipeline_ms;
      totals_.pipeline_wait_ms += times.pipeline_wait_ms;
      totals_.tensor_ms += times.tensor_ms;
      totals_.data_parallel_ms += data_parallel_ms;
      totals_.keep_ms += keep_ms;
    }
    report(step_ms, times.pipeline_wait_ms + times.tensor_ms + data_parallel_ms, times.data_ms);
    if (auto exit = save_if_due(requested)) return exit;
    // update() made step_ the completed one; a recovery in save_if_due() set step_ past the
    // agreed completed step instead, to be run (again) next.
    if (step_ == completed_) ++step_;
    return std::nullopt;
  }

  /// The optimizer's update of step_ (after keeping what a roll-back would need); returns the
  /// milliseconds the keeping took.
  double update() {
    double keep_ms = 0;
    if (in_place_) {
      // What a roll-back to `completed_` needs if a peer fails before completing this step.
      Clock::time_point keeping = Clock::now();
      kept_.keep(completed_, model_.params(), optimizer_.velocity());
      keep_ms = ms_since(keeping);
    }
    optimizer_.step(model_.params(), grad_.data());
    completed_ = step_;
    return keep_ms;
  }

  /// The beat, and the step's log line every --log-every steps.
  void report(double step_ms, double comm_ms, double data_ms) {
    bool last = step_ == options_.steps;
    worker_.beat(step_,
                 {.step_ms = step_ms,
                  .loss = loss_,
                  .comm_ms = comm_ms,
                  .data_ms = data_ms,
                  .samples = static_cast<double>(batch_.global),
                  .peak_memory_bytes = Staging::peak_device_bytes() > 0
                                           ? std::optional<double>(static_cast<double>(Staging::peak_device_bytes()))
                                           : std::nullopt},
                 last);
    if (options_.log_every > 0 && (step_ % options_.log_every == 0 || step_ == untimed_step_ || last)) {
      std::printf("step %" PRId64 " loss %.4f step_ms %.1f\n", step_, loss_, step_ms);
      std::fflush(stdout);
    }
  }

  /// A checkpoint of the completed step_ every --ckpt-interval steps or when requested. A save
  /// that failed because the generation moved on is recovered from (step_ then says what to
  /// redo).
  std::optional<int> save_if_due(bool requested) {
    if (ckpt_options_.dir.empty() || !((ckpt_interval_ > 0 && step_ % ckpt_interval_ == 0) || requested)) {
      return std::nullopt;
    }
    TrainState state{widths_, topology_.tp_size, topology_.pp_size, topology_.tp_rank, topology_.pp_rank,
                     step_, step_ * batch_.global, model_.params(), optimizer_.velocity()};
    if (auto saved = checkpointer_.save(step_, encode_state(state)); !saved) {
      if (!save_failed_by_generation()) return fail(worker_, links_, saved.error().message);
      // The step itself completed: recovery continues from it (or rolls it back).
      return failed(saved.error().message);
    }
    return std::nullopt;
  }

  worker::Worker& worker_;
  const Options& options_;
  const TrainingHooks& hooks_;
  const worker::Topology& topology_;
  const worker::Settings& settings_;
  const BatchPlan batch_;
  const std::vector<int> widths_;
  const ModelLayout layout_;
  const Millis timeout_;
  // With DTRAIN_IN_PLACE=1 a failed collective is not the end: see recover().
  const bool in_place_;
  const Millis rejoin_timeout_;
  const Clock::time_point started_ = Clock::now();

  MlpShard model_;
  SgdMomentum optimizer_;
  SyntheticData data_;
  const size_t count_;        ///< this rank's parameters
  const size_t activations_;  ///< the largest activation message of a micro-batch
  Links links_;               ///< this generation's; before checkpointer_, so destroyed after it
  const worker::CheckpointOptions ckpt_options_;
  const int ckpt_interval_;
  worker::Checkpointer checkpointer_;

  int64_t step_ = 0;       ///< the step being run
  int64_t completed_ = 0;  ///< the newest step whose optimizer update this rank holds (-1: none, a replacement)
  KeptState kept_;         ///< the pre-step state a roll-back returns to
  int recoveries_ = 0, roll_backs_ = 0;
  // Checkpoint requests (ckpt.request) across an in-place recovery: see run_step().
  bool request_owed_ = false;
  int64_t request_served_step_ = -1;
  /// The gradients, then two slots reduced with them: the batch's loss sum, and how many ranks
  /// have heard a checkpoint request by this step.
  std::vector<double> grad_;
  double loss_ = 0;
  TimingTotals totals_;
  const int slow_ms_;
  /// The first step of a run, and of each rejoin, includes connection warm-up: not timed.
  int64_t untimed_step_ = 0;
};

}  // namespace

int train(worker::Worker& worker, const Options& options, const TrainingHooks& hooks, TrainingOutcome* outcome) {
  const worker::Topology& topology = worker.topology();
  auto batch = plan_batch(options, worker.settings(), topology.dp_size);
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
  TrainingRun run(worker, options, hooks, *batch, std::move(widths), *layout);
  return run.run(outcome);
}

}  // namespace dtrain::trainer
