// dtrain-train: the reference trainer. An MLP learns a fixed random teacher's labels on
// synthetic data, data parallel over the ranks dtrain starts, with checkpoints and heartbeats
// through libdtrain_worker. Same global batch ⇒ same loss curve for any number of ranks.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"
#include "worker/trainer/data.h"
#include "worker/trainer/model.h"
#include "worker/trainer/optimizer.h"
#include "worker/trainer/options.h"
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
/// every global batch, in `accum` micro-batches of `micro`.
struct BatchPlan {
  int global = 0;
  int micro = 0;
  int accum = 0;
};

worker::Result<BatchPlan> plan_batch(const Options& options, const worker::Settings& settings, int dp_size) {
  BatchPlan plan;
  plan.global = settings.global_batch > 0 ? settings.global_batch : options.global_batch;
  plan.micro = settings.micro_batch > 0 ? settings.micro_batch : options.micro_batch;
  plan.accum = settings.grad_accum > 0 ? settings.grad_accum : plan.global / (dp_size * plan.micro);
  if (plan.accum < 1 || static_cast<int64_t>(dp_size) * plan.micro * plan.accum != plan.global) {
    return worker::Error{"dtrain-train: global batch " + std::to_string(plan.global) + " is not data-parallel size " +
                         std::to_string(dp_size) + " x micro batch " + std::to_string(plan.micro) +
                         " x grad accumulation " + std::to_string(plan.accum) +
                         "; choose batch.global as a multiple of dp x batch.micro"};
  }
  return plan;
}

int fail(worker::Worker& worker, worker::Communicator* comm, const std::string& message) {
  std::fprintf(stderr, "dtrain-train: rank %d: %s\n", worker.topology().rank, message.c_str());
  if (comm != nullptr) comm->abort();
  worker.bye("error");
  return 1;
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
  if (!batch) {
    std::fprintf(stderr, "%s\n", batch.error().message.c_str());
    worker.bye("error");
    return 2;
  }
  Millis timeout(options.comm_timeout_ms);
  auto connected = worker.connect(timeout);
  if (!connected) return fail(worker, nullptr, connected.error().message);
  worker::Communicator& comm = **connected;

  Mlp model(options.inputs, options.hidden, options.layers, options.classes, options.seed);
  SgdMomentum optimizer(model.parameter_count(), options.lr, options.momentum);
  SyntheticData data(options.inputs, options.classes, options.data_seed);

  worker::CheckpointOptions ckpt_options = worker::checkpoint_options(settings);
  if (ckpt_options.dir.empty()) ckpt_options.dir = options.ckpt_dir;
  ckpt_options.async = options.ckpt_async;
  int ckpt_interval = settings.ckpt_interval > 0 ? settings.ckpt_interval : options.ckpt_interval;
  worker::Checkpointer checkpointer(worker, ckpt_options);

  int64_t first_step = 1;
  auto restored = checkpointer.restore(settings.resume_step);
  if (!restored) return fail(worker, &comm, restored.error().message);
  if (restored->has_value()) {
    auto state = decode_state((*restored)->payload, model.widths());
    if (!state) return fail(worker, &comm, "checkpoint step-" + std::to_string((*restored)->step) + ": " + state.error().message);
    model.params() = std::move(state->params);
    optimizer.velocity() = std::move(state->velocity);
    first_step = state->step + 1;
    std::printf("dtrain-train: resumed from checkpoint step-%" PRId64 " in %s\n", state->step, ckpt_options.dir.c_str());
  }
  size_t count = model.parameter_count();
  auto staging = Staging::create(comm, (count + 1) * sizeof(double));
  if (!staging) return fail(worker, &comm, staging.error().message);
  // Every rank computed or loaded the same parameters; broadcasting rank 0's makes that a fact.
  if (auto sent = (*staging)->broadcast(model.params().data(), model.parameter_count() * sizeof(float), 0, timeout); !sent) {
    return fail(worker, &comm, sent.error().message);
  }
  if (topology.rank == 0) {
    std::printf("dtrain-train: world %d (dp %d), backend %s, global batch %d = %d x micro %d x accum %d, %zu parameters\n",
                topology.world_size, topology.dp_size, comm.backend(), batch->global, topology.dp_size,
                batch->micro, batch->accum, model.parameter_count());
  }
  std::fflush(stdout);

  std::vector<double> grad(count + 1);  // last slot: the batch's loss sum, reduced with the gradients
  std::vector<double> x(options.inputs);
  // TP/PP peers of a DP rank replicate its work (the reference trainer does not split layers),
  // so the reduced sums count each sample tp*pp times.
  double divisor = static_cast<double>(batch->global) * topology.tp_size * topology.pp_size;
  double loss = 0;
  int64_t step = first_step - 1;
  for (step = first_step; step <= options.steps; ++step) {
    Clock::time_point started = Clock::now();
    std::fill(grad.begin(), grad.end(), 0.0);
    double data_ms = 0;
    uint64_t base = static_cast<uint64_t>(step - 1) * batch->global +
                    static_cast<uint64_t>(topology.dp_rank) * (batch->global / topology.dp_size);
    for (int micro = 0; micro < batch->accum; ++micro) {
      for (int k = 0; k < batch->micro; ++k) {
        Clock::time_point fetch = Clock::now();
        int label = data.sample(base + static_cast<uint64_t>(micro) * batch->micro + k, x.data());
        data_ms += ms_since(fetch);
        grad[count] += model.accumulate(x.data(), label, grad.data());
      }
    }
    Clock::time_point reduce = Clock::now();
    if (auto reduced = (*staging)->allreduce_sum(grad.data(), grad.size(), timeout); !reduced) {
      return fail(worker, &comm, "step " + std::to_string(step) + ": " + reduced.error().message);
    }
    double comm_ms = ms_since(reduce);
    for (double& value : grad) value /= divisor;
    loss = grad[count];
    optimizer.step(model.params(), grad.data());
    double step_ms = ms_since(started);
    bool last = step == options.steps;
    worker.beat(step, {loss, step_ms, comm_ms, data_ms, batch->global}, last);
    if (options.log_every > 0 && (step % options.log_every == 0 || step == first_step || last)) {
      std::printf("step %" PRId64 " loss %.4f step_ms %.1f\n", step, loss, step_ms);
      std::fflush(stdout);
    }
    if (ckpt_interval > 0 && !ckpt_options.dir.empty() && step % ckpt_interval == 0) {
      TrainState state{model.widths(), step, step * batch->global, model.params(), optimizer.velocity()};
      if (auto saved = checkpointer.save(step, encode_state(state)); !saved) {
        return fail(worker, &comm, saved.error().message);
      }
    }
  }
  if (auto saved = checkpointer.wait(); !saved) return fail(worker, &comm, saved.error().message);
  std::printf("dtrain-train: final step=%d loss=%.6f checksum=%016" PRIx64 "\n", options.steps, loss, model.checksum());
  std::fflush(stdout);
  worker.bye("finished");
  return 0;
}

}  // namespace
}  // namespace dtrain::trainer

int main(int argc, char** argv) {
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
