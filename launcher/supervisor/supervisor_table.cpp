// The supervisor's state × event table, and the one dispatch that consults it (supervisor.h).
// One row per event: for each set of phases, the handler that runs; a phase a row does not name
// ignores the event. The handlers are in supervisor_events.cpp and supervisor_in_place.cpp.
#include "launcher/supervisor/supervisor.h"

#include <initializer_list>
#include <stdexcept>

namespace dtrain::supervisor {

namespace {

using Phase = Supervisor::Phase;
using PhaseSet = unsigned;

constexpr PhaseSet in(std::initializer_list<Phase> phases) {
  PhaseSet set = 0;
  for (Phase phase : phases) set |= 1u << static_cast<unsigned>(phase);
  return set;
}

// The columns, one bit each, and the sets of them that rows name together.
constexpr PhaseSet kConnecting = in({Phase::connecting});
constexpr PhaseSet kLaunching = in({Phase::launching});
constexpr PhaseSet kRunning = in({Phase::running});
constexpr PhaseSet kInPlaceKilling = in({Phase::in_place_killing});
constexpr PhaseSet kInPlaceLaunching = in({Phase::in_place_launching});
constexpr PhaseSet kInPlaceRunning = in({Phase::in_place_running});
constexpr PhaseSet kRecovering = in({Phase::recovering});
constexpr PhaseSet kStopping = in({Phase::stopping});
constexpr PhaseSet kAll = (1u << Supervisor::kTablePhases) - 1;
constexpr PhaseSet kAfterConnecting = kAll & ~kConnecting;
constexpr PhaseSet kAnyLaunching = kLaunching | kInPlaceLaunching;
/// A generation whose workers are launching or running (normally or in place): a failure of one
/// of them is a failure of the run.
constexpr PhaseSet kLive = kLaunching | kRunning | kInPlaceLaunching | kInPlaceRunning;
constexpr PhaseSet kInPlace = kInPlaceKilling | kInPlaceLaunching | kInPlaceRunning;
/// The generation is being stopped: to restart it, or to end the run.
constexpr PhaseSet kEnding = kRecovering | kStopping;

template <class E>
struct Cell {
  PhaseSet phases;
  void (Supervisor::*handler)(const E&);
};

/// One row: each phase's handler. Naming a phase twice fails the build (the table is constexpr).
template <class E>
constexpr std::array<void (Supervisor::*)(const E&), Supervisor::kTablePhases> row(std::initializer_list<Cell<E>> cells) {
  std::array<void (Supervisor::*)(const E&), Supervisor::kTablePhases> handlers{};
  PhaseSet named = 0;
  for (const Cell<E>& cell : cells) {
    if (named & cell.phases) throw std::logic_error("a phase named twice in one row of the supervisor's table");
    named |= cell.phases;
    for (size_t phase = 0; phase < Supervisor::kTablePhases; ++phase) {
      if (cell.phases & (1u << phase)) handlers[phase] = cell.handler;
    }
  }
  return handlers;
}

}  // namespace

const Supervisor::Table& Supervisor::table() {
  using S = Supervisor;
  static constexpr Table kTable{
      row<HostConnected>({{kConnecting, &S::connect_host_and_start},
                          {kAfterConnecting, &S::connect_host}}),
      row<HostLost>({{kConnecting, &S::lose_host_before_start},
                     {kLive | kInPlaceKilling, &S::fail_lost_host},
                     {kRecovering, &S::lose_host_while_recovering},
                     {kStopping, &S::lose_host_while_stopping}}),
      row<WorkerStarted>({{kLaunching, &S::launch_started},
                          {kInPlaceLaunching, &S::replacement_started},
                          {kAfterConnecting & ~kAnyLaunching, &S::note_started}}),
      row<WorkerSpawnFailed>({{kLive, &S::give_up_on_spawn_failure},
                              {kInPlaceKilling | kEnding, &S::note_spawn_failed}}),
      row<WorkerExited>({{kLive, &S::worker_exited},
                         {kInPlaceKilling, &S::exit_while_killing},
                         {kEnding, &S::exit_while_stopping}}),
      row<WorkerProgress>({{kRunning | kStopping, &S::progress},
                           {kInPlaceRunning, &S::progress_in_place},
                           {kAnyLaunching | kInPlaceKilling | kRecovering, &S::note_beat}}),
      row<WorkerCommReady>({{kAfterConnecting, &S::comm_ready}}),
      row<CheckpointCommitted>({{kAll, &S::checkpoint_committed}}),
      row<CheckpointRejected>({{kAll, &S::checkpoint_rejected}}),
      row<WorkerStoppedSeen>({{kAfterConnecting, &S::stopped_seen}}),
      row<WorkerMisbehaved>({{kLive, &S::misbehaved}}),
      row<GenerationReleased>({{kEnding, &S::host_released}}),
      row<StopRequested>({{kConnecting | kLive, &S::stop_run},
                          {kInPlaceKilling | kRecovering, &S::stop_while_recovering}}),
      row<Tick>({{kConnecting, &S::check_connecting},
                 {kLaunching, &S::check_launch},
                 {kRunning, &S::watch_hangs},
                 {kInPlaceKilling, &S::check_in_place},
                 {kInPlaceLaunching, &S::check_in_place_launch},
                 {kInPlaceRunning, &S::check_in_place_hangs},
                 {kEnding, &S::check_release}}),
      row<GenerationSpawned>({{kAnyLaunching, &S::generation_spawned}}),
      row<LaunchStepFailed>({{kAnyLaunching, &S::launch_step_failed}}),
      row<SurvivorsCarriedOver>({{kInPlace, &S::survivors_carried_over}}),
      row<HostHealthReported>({{kConnecting, &S::health_before_start},
                               {kRecovering, &S::health_while_recovering},
                               {kInPlaceKilling, &S::health_in_place},
                               {kAfterConnecting & ~kRecovering & ~kInPlaceKilling, &S::health_later}}),
  };
  return kTable;
}

template <class E>
void Supervisor::dispatch(const E& event) {
  Handler<E> handler = std::get<Row<E>>(table())[static_cast<size_t>(phase_)];
  if (handler) (this->*handler)(event);
}

std::vector<Action> Supervisor::on_event(const Event& event) {
  out_.clear();
  if (!is_terminal(state())) std::visit([this](const auto& e) { dispatch(e); }, event);
  return std::move(out_);
}

RunState Supervisor::reported(Phase phase) {
  switch (phase) {
    case Phase::connecting: return RunState::connecting;
    case Phase::launching:
    case Phase::in_place_launching: return RunState::launching;
    case Phase::running:
    case Phase::in_place_running: return RunState::running;
    case Phase::in_place_killing:
    case Phase::recovering: return RunState::recovering;
    case Phase::stopping: return RunState::stopping;
    case Phase::succeeded: return RunState::succeeded;
    case Phase::failed: return RunState::failed;
    case Phase::stopped: return RunState::stopped;
    case Phase::preempted: return RunState::preempted;
  }
  return RunState::failed;
}

}  // namespace dtrain::supervisor
