#pragma once
// dtrain-train's command line. Hand-parsed: CLI11 belongs to cli/ only.

#include <string>
#include <vector>

#include "worker/runtime/worker.h"

namespace dtrain::trainer {

struct Options {
  int steps = 200;
  int inputs = 32;
  int hidden = 64;
  int layers = 2;              ///< hidden layers
  int classes = 10;
  double lr = 0.05;
  double momentum = 0.9;
  uint64_t seed = 1;           ///< student initialisation
  uint64_t data_seed = 1234;   ///< inputs and the teacher that labels them
  int global_batch = 0;        ///< used when DTRAIN_GLOBAL_BATCH is unset; 0: derived (near 64)
  int micro_batch = 8;         ///< used when DTRAIN_MICRO_BATCH is unset
  int log_every = 20;
  bool standalone = false;
  bool ckpt_async = false;
  std::string ckpt_dir;        ///< used when DTRAIN_CKPT_DIR is unset
  int ckpt_interval = 0;       ///< used when DTRAIN_CKPT_INTERVAL is unset
  int comm_timeout_ms = 30'000;
  bool help = false;
};

/// Parses argv; errors quote the flag and value.
worker::Result<Options> parse_options(const std::vector<std::string>& args);

const char* usage();

}  // namespace dtrain::trainer
