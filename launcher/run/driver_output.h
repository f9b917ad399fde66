#pragma once
// DriverOutput: what the driver's parts (FrameRouter, GenerationLauncher) hand back to it — Events
// for the supervisor, records for events.jsonl, supervisor.log, the KV store's replies. RunDriver
// is the real one; an interface so that each part's tests can fake it (run_frame_router_test,
// run_generation_launcher_test). Each part's own Output adds what only that part needs.

#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include "launcher/store/kv_store.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

class DriverOutput {
 public:
  virtual ~DriverOutput() = default;
  /// An event for the supervisor; the driver carries out its Actions before this returns.
  virtual void feed(const supervisor::Event& event) = 0;
  /// An event for events.jsonl.
  virtual void record(nlohmann::json event) = 0;
  /// supervisor.log.
  virtual spdlog::logger& log() = 0;
  /// Replies of the KV store to workers, each to its worker's agent.
  virtual void send_store_replies(const std::vector<store::StoreReply>& replies) = 0;
};

}  // namespace dtrain::run
