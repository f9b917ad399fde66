// dtrain-bench-allreduce: bandwidth and latency of the runtime's Gloo Communicator (the one the
// trainer uses), float32 sum in place, with every rank a separate process on this machine (TCP
// over 127.0.0.1), rendezvous through a FileKv in a private temporary directory.
//
//   dtrain-bench-allreduce [--ranks 2,4] [--sizes-mib 1,2,4,8,16,32,64] [--reps 5] [--timeout-s 300]
//
// Prints one row per (ranks, size): the median over --reps repetitions of the per-call time
// (each repetition: barrier, then a batch of calls; a repetition's time is the slowest rank's),
// the algorithm bandwidth (bytes / time) and the bus bandwidth (algbw x 2(n-1)/n, the figure
// NCCL's tests print, comparable across rank counts).
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/base/process_signal.h"
#include "worker/bench/file_kv.h"
#include "worker/bench/options.h"

namespace dtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::vector<int> ranks{2, 4};
  std::vector<int> sizes_mib{1, 2, 4, 8, 16, 32, 64};
  int reps = 5;
  int timeout_s = 300;
};

/// Calls per repetition: enough to dwarf the barrier for small sizes, few for large ones.
int calls_for(int size_mib) { return std::clamp(32 / size_mib, 2, 16); }

/// One rank's whole benchmark. Returns the process exit code.
int run_rank(const Config& config, int rank, int world, const std::string& kv_dir) {
  worker::Topology topology;
  topology.rank = topology.dp_rank = topology.local_rank = rank;
  topology.world_size = topology.dp_size = topology.local_world_size = world;
  worker::Settings settings;
  settings.backend = "gloo";  // even in a CUDA build: this measures the CPU back end
  auto worker = worker::Worker::in_process(topology, settings, std::make_shared<FileKv>(kv_dir));
  worker::Millis timeout(config.timeout_s * 1000);
  auto connected = worker->connect(timeout);
  if (!connected) {
    std::fprintf(stderr, "dtrain-bench-allreduce: rank %d: %s\n", rank, connected.error().message.c_str());
    return 1;
  }
  worker::Communicator& comm = **connected;
  for (int size_mib : config.sizes_mib) {
    size_t count = static_cast<size_t>(size_mib) * 1024 * 1024 / sizeof(float);
    std::vector<float> data(count, 1.0f);
    // Warm-up call doubles as a correctness check: a sum of ones is the world size.
    if (auto status = comm.allreduce_sum(data.data(), count, timeout); !status) {
      std::fprintf(stderr, "dtrain-bench-allreduce: rank %d: %s\n", rank, status.error().message.c_str());
      return 1;
    }
    if (data.front() != static_cast<float>(world) || data.back() != static_cast<float>(world)) {
      std::fprintf(stderr, "dtrain-bench-allreduce: rank %d: wrong sum %g (expected %d)\n", rank, data.front(), world);
      return 1;
    }
    int calls = calls_for(size_mib);
    std::vector<double> per_call_ms;
    for (int rep = 0; rep < config.reps; ++rep) {
      std::fill(data.begin(), data.end(), 0.0f);  // sums of zeros stay finite however many calls
      if (auto status = comm.barrier(timeout); !status) {
        std::fprintf(stderr, "dtrain-bench-allreduce: rank %d: %s\n", rank, status.error().message.c_str());
        return 1;
      }
      auto start = Clock::now();
      for (int call = 0; call < calls; ++call) {
        if (auto status = comm.allreduce_sum(data.data(), count, timeout); !status) {
          std::fprintf(stderr, "dtrain-bench-allreduce: rank %d: %s\n", rank, status.error().message.c_str());
          return 1;
        }
      }
      std::vector<double> elapsed(static_cast<size_t>(world), 0.0);
      elapsed[static_cast<size_t>(rank)] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (auto status = comm.allreduce_sum(elapsed.data(), elapsed.size(), timeout); !status) {
        std::fprintf(stderr, "dtrain-bench-allreduce: rank %d: %s\n", rank, status.error().message.c_str());
        return 1;
      }
      per_call_ms.push_back(*std::max_element(elapsed.begin(), elapsed.end()) / calls);
    }
    if (rank == 0) {
      std::sort(per_call_ms.begin(), per_call_ms.end());
      double median = per_call_ms[per_call_ms.size() / 2];
      double bytes = static_cast<double>(count * sizeof(float));
      double algbw = bytes / (median / 1000.0) / 1e9;
      double busbw = algbw * 2.0 * (world - 1) / world;
      std::printf("%5d  %8d  %5dx%-3d  %9.2f  %9.2f  %10.2f  %10.2f\n", world, size_mib, calls, config.reps, median,
                  per_call_ms.front(), algbw, busbw);
      std::fflush(stdout);
    }
  }
  return 0;
}

/// Forks `world` ranks, waits for them within the timeout, kills any left. True if all succeeded.
bool run_world(const Config& config, int world) {
  char pattern[] = "/tmp/dtrain-bench-kv-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    std::perror("dtrain-bench-allreduce: mkdtemp");
    return false;
  }
  std::string kv_dir = pattern;
  std::fflush(stdout);
  std::vector<ProcessHandle> children;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      std::_Exit(run_rank(config, rank, world, kv_dir));
    }
    if (pid < 0) {
      std::perror("dtrain-bench-allreduce: fork");
      break;
    }
    children.push_back(ProcessHandle::for_child(pid));
  }
  bool ok = static_cast<int>(children.size()) == world;
  auto deadline = Clock::now() + std::chrono::seconds(config.timeout_s);
  size_t running = children.size();
  while (running > 0) {
    for (const ProcessHandle& child : children) {
      if (child.reaped()) continue;
      if (std::optional<int> status = child.try_reap()) {
        --running;
        if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) ok = false;
      }
    }
    if (running == 0) break;
    if (!ok || Clock::now() >= deadline) {
      // One rank failed or time is up: the others would only wait for their timeout. A rank
      // reaped already is not signalled (its pid may be another process's by now).
      for (const ProcessHandle& child : children) (void)send_signal(child, SIGKILL);
      for (const ProcessHandle& child : children) (void)child.reap();
      if (Clock::now() >= deadline) std::fprintf(stderr, "dtrain-bench-allreduce: %d ranks: over %ds, killed\n", world, config.timeout_s);
      ok = false;
      break;
    }
    ::usleep(10'000);
  }
  std::error_code ignored;
  std::filesystem::remove_all(kv_dir, ignored);
  return ok;
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) {
  using namespace dtrain::bench;
  Config config;
  OptionParser parser("dtrain-bench-allreduce",
                      "[--ranks 2,4] [--sizes-mib 1,2,4,8,16,32,64] [--reps 5] [--timeout-s 300]");
  parser.int_list("--ranks", config.ranks);
  parser.int_list("--sizes-mib", config.sizes_mib);
  parser.integer("--reps", config.reps);
  parser.integer("--timeout-s", config.timeout_s);
  if (int code = parser.parse(argc, argv); code >= 0) return code;
  for (int world : config.ranks) {
    if (world < 2) {
      std::fprintf(stderr, "dtrain-bench-allreduce: --ranks %d: need at least 2 ranks to measure an allreduce\n", world);
      return 2;
    }
  }
  std::printf("# Gloo allreduce (float32 sum, in place), ranks = processes over TCP 127.0.0.1\n");
  std::printf("%5s  %8s  %9s  %9s  %9s  %10s  %10s\n", "ranks", "size_MiB", "calls", "median_ms", "min_ms",
              "algbw_GB/s", "busbw_GB/s");
  bool ok = true;
  for (int world : config.ranks) ok = run_world(config, world) && ok;
  return ok ? 0 : 1;
}
