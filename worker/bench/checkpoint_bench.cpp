// dtrain-bench-checkpoint: write throughput of the runtime's Checkpointer (the trainer's path:
// CRC32C, temp file, fsync, rename, directory fsync, manifest) for one shard of a given size,
// as a world of one. dd with conv=fsync of the same size on the same disk is the baseline
// (scripts/bench/checkpoint.sh runs both).
//
//   dtrain-bench-checkpoint --dir DIR   (writes DIR/dtrain-bench-checkpoint-PID/, then removes it)
//   [--sizes-mib 16,64,256] [--reps 3]
//
// Each size is saved once untimed first, so that every timed save is a steady-state one, as in
// training: it also prunes (verifies what it keeps, deletes the step before it).
//
// Prints "# crc32c: sse4.2" (the implementation in use: sse4.2, armv8-crc or table), then one
// line per size: "checkpoint SIZE_MiB median_s min_s median_MB/s crc32c_MB/s" (MB = 10^6
// bytes); the last figure is crc32c() alone over the same payload, in memory, so that a gap to
// dd can be told apart into checksum and I/O.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "worker/bench/options.h"
#include "worker/runtime/crc32c.h"
#include "worker/runtime/worker.h"

int main(int argc, char** argv) {
  using namespace dtrain;
  std::string dir;
  std::vector<int> sizes_mib{16, 64, 256};
  int reps = 3;
  bench::OptionParser parser("dtrain-bench-checkpoint", "--dir DIR [--sizes-mib 16,64,256] [--reps 3]");
  parser.text("--dir", dir);
  parser.int_list("--sizes-mib", sizes_mib);
  parser.integer("--reps", reps);
  if (int code = parser.parse(argc, argv); code >= 0) return code;
  if (reps < 1) {
    std::fprintf(stderr, "dtrain-bench-checkpoint: --reps must be at least 1\n");
    return 2;
  }
  if (dir.empty()) {
    std::fprintf(stderr, "dtrain-bench-checkpoint: --dir is required (a directory on the disk to measure; "
                         "a temporary subdirectory is written there and removed)\n");
    return 2;
  }
  std::error_code error;
  dir += "/dtrain-bench-checkpoint-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir, error);
  if (error) {
    std::fprintf(stderr, "dtrain-bench-checkpoint: --dir '%s': %s\n", dir.c_str(), error.message().c_str());
    return 1;
  }

  worker::Settings settings;
  settings.ckpt_dir = dir;
  auto worker = worker::Worker::standalone(settings);
  worker::CheckpointOptions options;
  options.dir = dir;
  options.keep = 1;  // pruning the previous step is part of every save, as in training
  worker::Checkpointer checkpointer(*worker, options);

  std::printf("# crc32c: %s\n", worker::crc32c_impl::implementation_name());
  std::mt19937_64 random(42);
  int64_t step = 0;
  for (int size_mib : sizes_mib) {
    // Random bytes, so that no layer below can shortcut zeros.
    std::string payload(static_cast<size_t>(size_mib) << 20, '\0');
    for (size_t i = 0; i + 8 <= payload.size(); i += 8) {
      uint64_t word = random();
      std::memcpy(&payload[i], &word, 8);
    }
    std::vector<double> seconds;
    for (int rep = 0; rep <= reps; ++rep) {
      std::string copy = payload;  // save() takes ownership; the copy is not timed
      auto start = std::chrono::steady_clock::now();
      worker::Status saved = checkpointer.save(++step, std::move(copy));
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!saved) {
        std::fprintf(stderr, "dtrain-bench-checkpoint: %s\n", saved.error().message.c_str());
        return 1;
      }
      if (rep > 0) seconds.push_back(elapsed);  // rep 0 only leaves a step behind to prune
    }
    std::sort(seconds.begin(), seconds.end());
    double median = seconds[seconds.size() / 2];
    auto crc_start = std::chrono::steady_clock::now();
    volatile uint32_t crc = worker::crc32c(payload.data(), payload.size());
    (void)crc;
    double crc_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - crc_start).count();
    std::printf("checkpoint %d %.3f %.3f %.1f %.1f\n", size_mib, median, seconds.front(),
                static_cast<double>(payload.size()) / median / 1e6, static_cast<double>(payload.size()) / crc_seconds / 1e6);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dir, error);
  return 0;
}
