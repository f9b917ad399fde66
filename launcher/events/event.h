#pragma once
// Event: any one event of the run log as its struct (events.h), the type that every reader of
// events.jsonl visits. The name → struct table is here, once.

#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/events/events.h"

namespace dtrain::events {

/// An event this dtrain does not know (a newer dtrain wrote the log): its name and the line as it
/// is, so that reading a newer run is not an error.
struct UnknownEvent {
  std::string name{};
  nlohmann::json raw = nlohmann::json::object();
  bool operator==(const UnknownEvent&) const = default;
};

/// Any one event of the catalogue, or an UnknownEvent. Readers std::visit it.
using Event = std::variant<
    RunSubmitted, RunResumed, RunState, RunStopRequested, RunFinished, RunlogDropped, RuntimeDirFallback,
    KubernetesCreated, KubernetesDeleted, SshInsecure, HostConnected, HostReattached, HostFacts, HostStack, StackConsistency, HostHealth, HostQuarantined, HostFailed, HostLost, HostExcluded, HostExclusionSkipped,
    AgentError, ProtocolError, SignalRefused, PlanGeneration, PlanChanged, PlanQuarantined, GenerationSpawned,
    GenerationStepped, WorkerStarted, WorkerSpawnFailed, WorkerExit, WorkerHang, WorkerSample, CommReady,
    CommWarn, HangDump, HangDetectionOff, HangDetectionOn, HangTimeoutChanged, StragglerDetected, StragglerCleared, GpuXid,
    GpuEccErrors, FailureDetected, FailureRootCause, FailureBudgetExhausted, FailureCrashLoop,
    FailureUnrecoverable, RecoveryStarted, RecoveryCompleted, RecoveryCarriedOver, RecoveryFallback,
    ResourcesReleased, ResourcesUnconfirmed, CheckpointCommitted, CheckpointRejected, CheckpointRequested,
    DrillInjected, DrillCorrupted, DrillVerdict, UnknownEvent>;

/// One callable per event type of interest, for std::visit: end with `[](const auto&) {}` for the
/// rest. std::visit(Overloaded{[&](const WorkerExit& exit) {...}, [](const auto&) {}}, event).
template <class... Callables>
struct Overloaded : Callables... {
  using Callables::operator()...;
};

/// The event `object` (one events.jsonl line, "ev" naming it) as its struct; an unknown "ev" is
/// an UnknownEvent. The error names the event and the field ("worker.exit.rank: expected an
/// integer, got a string \"x\""). Never throws.
Result<Event> parse_event(const nlohmann::json& object);

/// The event's name: its struct's catalogue name, or an UnknownEvent's own.
std::string_view event_name(const Event& event);

/// The event as events.jsonl holds it (less "ts"): its struct's to_json(), or an UnknownEvent's
/// line as it came.
nlohmann::json to_json(const Event& event);

}  // namespace dtrain::events
