#pragma once
// The worker environment of one generation (docs/architecture.md §3), built from the plan: the
// torchrun-compatible variables and dtrain's own. Pure, so tests can check every variable.

#include <map>
#include <string>

#include "launcher/plan/rank_plan.h"
#include "launcher/proto/stack_fingerprint.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::run {

using EnvMap = std::map<std::string, std::string>;

struct GenerationContext {
  std::string run_id;
  int generation = 0;
  int restart_count = 0;
  int64_t resume_step = -1;
  std::string master_addr;   ///< rank 0's host as the other hosts reach it
  int master_port = 0;
  std::string backend;       ///< "gloo" or "nccl" (auto already resolved)
  std::string checkpoint_dir;
  bool omp_threads_set = false;  ///< OMP_NUM_THREADS already set by the user
};

/// Variables common to every worker of the generation (spec worker.env included).
EnvMap common_worker_env(const spec::JobSpec& spec, const plan::RankPlan& plan,
                         const GenerationContext& context);

/// Variables of one rank (RANK, LOCAL_RANK, GROUP_RANK, DTRAIN_DP_RANK, ...).
EnvMap rank_worker_env(const plan::RankPlan& plan, const plan::RankSlot& slot);

/// Device variables of one rank. DTRAIN_DEVICE is always its physical slot (GPU index as
/// nvidia-smi numbers it; hosts[].only_slots honoured). CUDA_VISIBLE_DEVICES lists the physical
/// slots its host uses, in LOCAL_RANK order, so that cuda:LOCAL_RANK is the rank's own GPU (what
/// an unmodified torchrun script selects) and a GPU left out of only_slots is invisible. It is
/// set only when `visible_devices` (backend nccl, or the host reported GPUs: a CPU-only host
/// gets no CUDA noise) and never when the spec's worker.env sets it (the user's choice wins).
EnvMap device_worker_env(const spec::JobSpec& spec, const plan::RankPlan& plan, const plan::RankSlot& slot,
                         bool visible_devices);

/// What each agent fingerprints for the spec's `consistency` (config.stack): the worker command,
/// its working directory, and the variables of worker.env that decide what it finds (PYTHON*,
/// PATH, LD_LIBRARY_PATH, VIRTUAL_ENV, CONDA_PREFIX, CUDA_HOME, HOME, DTRAIN_IMAGE_DIGEST), as a
/// spawn will give them. nullopt with consistency: off (the agents are not asked).
std::optional<proto::StackProbeRequest> stack_probe_request(const spec::JobSpec& spec);

/// What master_address() decides from: facts of the launch node and the run.
struct MasterAddressFacts {
  std::string launch_hostname;          ///< gethostname() of the launch node
  /// True when launch_hostname resolves to an address other than loopback (Debian maps its own
  /// name to 127.0.1.1 in /etc/hosts: useless to another host).
  bool launch_hostname_routable = false;
  /// The local address of the SSH connection to the first remote host (getsockname): an
  /// address of ours that host has proven it can reach. "" when unknown.
  std::string ssh_source_address;
};

/// MASTER_ADDR: an address every host of the plan can reach rank 0's host by.
///  - every rank on the launch node: 127.0.0.1;
///  - rank 0 on a remote host: its name as the spec lists it (we reached it by that name);
///  - rank 0 on the launch node with remote hosts taking part: the launch node's hostname when it
///    resolves to a non-loopback address, else the SSH connection's source address, else the
///    hostname anyway (never "localhost").
/// The spec's worker.env MASTER_ADDR, when set, wins (for NAT or a dedicated network).
std::string master_address(const spec::JobSpec& spec, const plan::RankPlan& plan, const MasterAddressFacts& facts);

}  // namespace dtrain::run
