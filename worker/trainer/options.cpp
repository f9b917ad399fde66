#include "worker/trainer/options.h"

#include <cerrno>
#include <cstdlib>

namespace dtrain::trainer {
namespace {

worker::Result<double> number(const std::string& flag, const std::string& text, double min_value) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0') {
    return worker::Error{"dtrain-train: " + flag + " '" + text + "' is not a number"};
  }
  if (value < min_value) {
    return worker::Error{"dtrain-train: " + flag + " '" + text + "' must be at least " + std::to_string(min_value)};
  }
  return value;
}

}  // namespace

const char* usage() {
  return "usage: dtrain-train [--steps N] [--inputs N] [--hidden N] [--layers N] [--classes N]\n"
         "                    [--lr X] [--momentum X] [--seed N] [--data-seed N]\n"
         "                    [--global-batch N] [--micro-batch N] [--log-every N]\n"
         "                    [--ckpt-dir DIR] [--ckpt-interval N] [--ckpt-async]\n"
         "                    [--comm-timeout-ms N] [--standalone]\n"
         "Trains an MLP classifier on deterministic synthetic data over the ranks dtrain starts,\n"
         "in the plan's layout: tensor parallel (pairs of layers split column/row, Megatron-style),\n"
         "pipeline parallel (stages of whole pairs, 1F1B micro-batch schedule) and data parallel\n"
         "on top. DTRAIN_GLOBAL_BATCH, DTRAIN_MICRO_BATCH, DTRAIN_CKPT_DIR and DTRAIN_CKPT_INTERVAL\n"
         "override the batch and checkpoint flags when set. With no batch from the spec or\n"
         "--global-batch, the global batch is the multiple of data x micro batch nearest 64.\n"
         "With DTRAIN_IN_PLACE=1 (spec elastic.in_place) a rank that loses a peer does not exit: it\n"
         "waits for the next generation, reconnects, and continues from the newest step every rank\n"
         "completed (rolling back one step from a kept copy if it is ahead); a replacement\n"
         "(DTRAIN_JOIN_LIVE=1) takes its state from a live data-parallel replica, not from disk.\n";
}

worker::Result<Options> parse_options(const std::vector<std::string>& args) {
  Options options;
  struct IntFlag {
    const char* name;
    int* target;
    int min_value;
  };
  IntFlag int_flags[] = {{"--steps", &options.steps, 0},           {"--inputs", &options.inputs, 1},
                         {"--hidden", &options.hidden, 1},         {"--layers", &options.layers, 0},
                         {"--classes", &options.classes, 2},       {"--global-batch", &options.global_batch, 1},
                         {"--micro-batch", &options.micro_batch, 1}, {"--log-every", &options.log_every, 0},
                         {"--ckpt-interval", &options.ckpt_interval, 0},
                         {"--comm-timeout-ms", &options.comm_timeout_ms, 1}};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      options.help = true;
      continue;
    }
    if (flag == "--standalone") {
      options.standalone = true;
      continue;
    }
    if (flag == "--ckpt-async") {
      options.ckpt_async = true;
      continue;
    }
    if (i + 1 >= args.size()) return worker::Error{"dtrain-train: unknown flag or missing value: '" + flag + "'\n" + usage()};
    const std::string& value = args[++i];
    bool matched = false;
    for (const IntFlag& int_flag : int_flags) {
      if (flag != int_flag.name) continue;
      worker::Result<double> parsed = number(flag, value, int_flag.min_value);
      if (!parsed) return parsed.error();
      if (*parsed != static_cast<int>(*parsed)) return worker::Error{"dtrain-train: " + flag + " '" + value + "' must be a whole number"};
      *int_flag.target = static_cast<int>(*parsed);
      matched = true;
    }
    if (matched) continue;
    if (flag == "--lr" || flag == "--momentum") {
      worker::Result<double> parsed = number(flag, value, 0);
      if (!parsed) return parsed.error();
      (flag == "--lr" ? options.lr : options.momentum) = *parsed;
    } else if (flag == "--seed" || flag == "--data-seed") {
      worker::Result<double> parsed = number(flag, value, 0);
      if (!parsed) return parsed.error();
      (flag == "--seed" ? options.seed : options.data_seed) = static_cast<uint64_t>(*parsed);
    } else if (flag == "--ckpt-dir") {
      options.ckpt_dir = value;
    } else {
      return worker::Error{"dtrain-train: unknown flag '" + flag + "'\n" + usage()};
    }
  }
  return options;
}

}  // namespace dtrain::trainer
