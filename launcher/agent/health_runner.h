#pragma once
// The agent's health checks on a thread of their own (issue 29): the agent's loop queues a check
// (after hello, and for each health request) and goes on answering — heartbeats continue while
// a site command runs for 30 s — and sends each report when ready_fd() polls readable. Internal
// to the agent module.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "launcher/agent/health_checks.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/host_health.h"

namespace dtrain::agent {

/// One check to run: the reply's id, the moment, and what the loop knows at that point.
struct HealthJob {
  int64_t id = 0;
  std::string moment = proto::health_moment::kStart;
  bool diagnose = false;
  std::vector<proto::XidEvent> xids{};  ///< seen since the previous job (the resource sampler's)
  std::vector<pid_t> workers{};         ///< this run's workers: their trees' GPU memory is not leftover
};

class HealthRunner {
 public:
  /// Starts the thread. `request` is config.health; `environment`'s own_pids and stop_fd are
  /// the runner's (the jobs' workers, and its stop).
  HealthRunner(proto::HealthRequest request, HealthEnvironment environment);
  /// Stops: a running site command is killed, a wait for leftover memory ends. Waits at most
  /// kStopWaitMs for the thread; one still blocked past that (a hung NVML or resolver call) is
  /// left behind, owning everything it uses, so the agent's exit is never held by a check.
  ~HealthRunner();
  HealthRunner(const HealthRunner&) = delete;
  HealthRunner& operator=(const HealthRunner&) = delete;

  void queue(HealthJob job);
  /// Readable while replies wait to be taken.
  int ready_fd() const;
  /// The replies finished since the last call (and clears ready_fd).
  std::vector<proto::HealthReply> take_replies();

  static constexpr int64_t kStopWaitMs = 2'000;

  struct Shared;  ///< between the runner and its thread (health_runner.cpp)

 private:
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace dtrain::agent
