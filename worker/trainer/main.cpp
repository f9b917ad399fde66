// dtrain-train: the reference trainer. An MLP learns a fixed random teacher's labels on
// synthetic data, in the plan's hybrid layout (tensor × pipeline × data parallel, see
// layout.h and pipeline.h), with checkpoints and heartbeats through libdtrain_worker. Same
// global batch ⇒ the same loss curve for any layout, up to float summation order. The run
// itself is train() (training.h).
#include <malloc.h>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"
#include "worker/trainer/options.h"
#include "worker/trainer/training.h"

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
    auto created = dtrain::worker::Worker::from_env(options->standalone);
    if (!created) {
      std::fprintf(stderr, "dtrain-train: %s\n", created.error().message.c_str());
      return 2;
    }
    return dtrain::trainer::train(**created, *options);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "dtrain-train: internal bug: uncaught exception: %s\n", failure.what());
    return 70;
  }
}
