#include "launcher/drill/run_view.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "launcher/drill/injector.h"
#include "launcher/events/event_catalogue.h"

namespace dtrain::drill {

using nlohmann::json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

std::atomic<bool> g_cancel{false};

/// The lowest step over all ranks when every rank runs and has reported one; else nullopt.
std::optional<int64_t> min_rank_step(const RunSnapshot& state) {
  if (state.ranks.empty()) return std::nullopt;
  std::optional<int64_t> lowest;
  for (const RunSnapshot::Rank& rank : state.ranks) {
    if (rank.state != "running" || !rank.step) return std::nullopt;
    lowest = lowest ? std::min(*lowest, *rank.step) : *rank.step;
  }
  return lowest;
}

bool committed_since(const LiveRun& run, size_t from, int generation, int64_t* step) {
  for (size_t i = from; i < run.events().size(); ++i) {
    const LoggedEvent& event = run.events()[i];
    const auto* committed = std::get_if<events::CheckpointCommitted>(&event.event);
    if (committed && event.gen == generation) {
      *step = committed->step;
      return true;
    }
  }
  return false;
}

}  // namespace

void request_cancel() { g_cancel.store(true); }
bool cancel_requested() { return g_cancel.load(); }

std::optional<int> GenerationView::rank_pid(int rank, const std::vector<LoggedEvent>& events) const {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    const auto* started = std::get_if<events::WorkerStarted>(&it->event);
    if (started && it->gen == generation && started->rank == rank) return started->pid;
  }
  return std::nullopt;
}

GenerationView view_of(const LiveRun& run) {
  GenerationView view;
  view.generation = run.generation();
  for (const LoggedEvent& event : run.events()) {
    const auto* started = std::get_if<events::WorkerStarted>(&event.event);
    if (started && event.gen == view.generation) {
      view.pids.push_back(started->pid);
      view.pids_by_host[started->host].push_back(started->pid);
    }
  }
  return view;
}

// Steady: the run says "running", every rank of the current generation runs and has made
// progress since the drill first saw it (or reached at_step). corrupt-checkpoint also waits for
// a fresh commit, so the next one is as far away as it can be when the newest is damaged.
Result<Ready> wait_until_ready(LiveRun& run, const Fault& fault, Deadline deadline, const Say& say) {
  std::optional<int64_t> baseline;
  int baseline_generation = -2;
  std::optional<size_t> commit_watch_from;
  bool said_waiting = false;
  for (;;) {
    if (cancel_requested()) return Error::infra("cancelled before the fault was injected");
    if (Status polled = run.poll(); !polled) return polled.error();
    Result<RunSnapshot> state = run.state();
    if (state) {
      if (std::string reason = not_live_reason(*state); !reason.empty()) {
        return Error::infra("run " + run.id() + " " + reason + " before " + fault.label() + " could be injected");
      }
      int generation = run.generation();
      std::optional<int64_t> step = min_rank_step(*state);
      bool running = state->state == "running" && state->generation == generation;
      if (running && step) {
        if (generation != baseline_generation) {
          baseline_generation = generation;
          baseline = step;
          commit_watch_from.reset();
        }
        bool at = fault.at_step ? *step >= *fault.at_step : *step >= *baseline + 2;
        if (at && fault.kind == FaultKind::corrupt_checkpoint) {
          if (!commit_watch_from) commit_watch_from = run.events().size();
          int64_t committed = -1;
          at = committed_since(run, *commit_watch_from, generation, &committed) &&
               complete_checkpoint_steps(run.checkpoint_dir()).size() >= 2;
          if (!at && committed >= 0) commit_watch_from = run.events().size();  // wait for the next one
        }
        if (at) return Ready{view_of(run), *step};
      }
      if (!said_waiting && say) {
        say(fault.at_step ? "waiting for every rank to reach step " + std::to_string(*fault.at_step)
                          : "waiting until " + run.id() + " trains steadily");
        said_waiting = true;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error::infra("run " + run.id() + " was not training steadily" +
                          (fault.at_step ? " at step " + std::to_string(*fault.at_step) : std::string()) +
                          " before the drill's deadline; give it more time with --timeout");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace dtrain::drill
