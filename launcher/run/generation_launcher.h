#pragma once
// GenerationLauncher: the supervisor's Actions about workers → frames to agents. It starts a
// generation (a port from rank 0's agent, then a spawn frame per host), continues one in place,
// stops one, kills ranks and samples a hung worker. It owns what a launch keeps between frames
// (the start waiting for its port, the newest generation's context, the launch node's address
// facts) and the one sequence of request ids. It sends through the driver's agent links; what
// else comes of a launch (events, plan files, store replies) leaves through Output.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/proto/supervisor_messages.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/driver_output.h"
#include "launcher/run/rank_progress.h"
#include "launcher/run/worker_env.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/store/kv_store.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

class GenerationLauncher {
 public:
  /// Where what comes of a launch goes. RunDriver is the real one; an interface so that tests
  /// can script Actions and see the frames and events that come out (run_generation_launcher_test).
  class Output : public DriverOutput {
   public:
    /// `text` into `path` (a generation's plan), written off the loop.
    virtual void write_file(std::string path, std::string text) = 0;
  };

  /// Everything referenced must outlive the launcher. `launch_hostname`: this machine's name,
  /// which MASTER_ADDR may be when rank 0 runs here.
  GenerationLauncher(Output& out, const spec::JobSpec& spec, const RunDirectory& run,
                     const supervisor::Supervisor& supervisor, store::KvStore& store, RankProgressTable& progress,
                     const AgentLinks& links, const Clock& clock, std::string launch_hostname);

  /// A new generation: the store and progress reset, its plan written, a port asked of rank 0's
  /// agent; the spawn follows port_reserved().
  void start_generation(const supervisor::StartGeneration& start);
  /// TERM to the generation's workers on each host (a host not connected is released at once).
  void stop_generation(const supervisor::StopGeneration& stop);
  /// In-place recovery: store to the new generation, gen_changed to every host, a spawn of the
  /// replaced ranks only (DTRAIN_JOIN_LIVE), on the generation's master address and port.
  void continue_in_place(const supervisor::ContinueInPlace& action);
  void kill_ranks(const supervisor::KillRanks& kill);
  /// Flight-recorder dumps from every host of the generation, then a stack sample of the rank.
  void capture_sample(const supervisor::CaptureSample& sample);
  /// The agent of rank 0's host reserved `port` for the request `request_id`: the generation
  /// waiting for it spawns.
  void port_reserved(int64_t request_id, int port);
  /// The agent on `host` could not reserve a port: the generation waiting for it fails now.
  void port_reservation_failed(const std::string& host, const std::string& error);
  /// A new id for a request to an agent: one sequence for every request, the driver's pings too.
  int64_t take_request_id() { return next_request_id_++; }

 private:
  void spawn_generation(int port);
  /// The spawn frame for `ranks` of `host` (all of its ranks when empty), each worker's env
  /// with `extra` on top.
  proto::SpawnRequest spawn_frame(int gen, const plan::RankPlan& plan, const GenerationContext& context,
                                  const EnvMap& common, const plan::PlanHost& host, const std::vector<int>& ranks,
                                  const EnvMap& extra);
  MasterAddressFacts master_address_facts(const plan::RankPlan& plan);

  Output& out_;
  const spec::JobSpec& spec_;
  const RunDirectory& run_;
  const supervisor::Supervisor& supervisor_;
  store::KvStore& store_;
  RankProgressTable& progress_;
  const AgentLinks& links_;
  const Clock& clock_;
  const std::string launch_hostname_;
  std::optional<supervisor::StartGeneration> pending_start_;  ///< waiting for its port
  std::optional<GenerationContext> spawned_context_;  ///< the newest generation spawned (in place: reused)
  std::optional<MasterAddressFacts> launch_node_facts_;  ///< looked up once, when first needed
  int64_t pending_port_id_ = 0;
  int64_t next_request_id_ = 1;
};

}  // namespace dtrain::run
