#include "launcher/supervisor/hang_detector.h"

#include <algorithm>
#include <tuple>

namespace dtrain::supervisor {

HangLimits HangLimits::of(const spec::HeartbeatSettings& heartbeat) {
  return {heartbeat.initial_hang_timeout().count(), heartbeat.checkpoint_hang_timeout().count(), heartbeat.interval.count()};
}

int64_t HangDetector::quiet_since(const RankStatus& rank) const {
  return std::max({rank.step_changed_ms, rank.phase_changed_ms, save_ended_ms_});
}

HangDetector::HangDetector(HangLimits limits, int64_t generation_started_ms)
    : limits_(limits), started_ms_(generation_started_ms) {}

HangCheck HangDetector::check(const std::vector<RankStatus>& ranks, int64_t now, bool maybe_host_loss) {
  HangCheck found;
  const int64_t hang_timeout = limits_.hang_timeout_ms;
  // Workers that never speak the worker protocol have no step to watch: say so once, so that an
  // operator does not rely on hang detection that cannot happen.
  if (!exemption_checked_ && now - started_ms_ > hang_timeout) {
    exemption_checked_ = true;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].state == RankState::running && ranks[i].step < 0) found.unwatched.push_back(static_cast<int>(i));
    }
    unwatched_.insert(unwatched_.end(), found.unwatched.begin(), found.unwatched.end());
  }
  // Ranks named there that have beaten since are watched now: say so, once, for all of them.
  std::erase_if(unwatched_, [&](int rank) {
    bool beating = rank >= 0 && rank < static_cast<int>(ranks.size()) && ranks[static_cast<size_t>(rank)].step >= 0;
    if (beating) found.watched_again.push_back(rank);
    return beating;
  });

  // When one rank stalls, its peers soon block in the next collective and stall too. Blame a
  // rank the agent saw stopped first; then the one that stalled first — lowest step, then the
  // oldest step change (beats are rate-limited, so steps alone can mislead).
  // A rank in a checkpoint save holds its peers the same way: while one saves, only the saver is
  // watched, with heartbeat.checkpoint_timeout, and when a save ends every rank's clock restarts.
  // A saver seen stopped (SIGSTOP, a debugger) is not saving: it gets hang_timeout.
  auto saving = [](const RankStatus& r) { return r.in_checkpoint && !r.seen_stopped; };
  auto quiet_since = [&](const RankStatus& r) { return this->quiet_since(r); };
  auto limit_of = [&](const RankStatus& r) { return saving(r) ? limits_.checkpoint_timeout_ms : hang_timeout; };
  // Whether any rank saves, and how long ago the first watched rank went past its limit (over
  // every stepping rank, and over the savers alone), in one pass: it runs ten times a second
  // over every rank, 131,072 at scale.
  bool any_saving = false;
  int64_t overdue_any_ms = 0, overdue_saver_ms = 0;
  for (const RankStatus& r : ranks) {
    if (r.state != RankState::running) continue;
    if (saving(r)) any_saving = true;
    if (r.step < 0) continue;
    int64_t overdue = now - quiet_since(r) - limit_of(r);
    overdue_any_ms = std::max(overdue_any_ms, overdue);
    if (saving(r)) overdue_saver_ms = std::max(overdue_saver_ms, overdue);
  }
  const int64_t most_overdue_ms = any_saving ? overdue_saver_ms : overdue_any_ms;
  auto watched = [&](const RankStatus& r) {
    return r.state == RankState::running && r.step >= 0 && (!any_saving || saving(r));
  };
  if (most_overdue_ms <= 0 || maybe_host_loss) return found;
  // Once one rank is past its limit, the blame goes to the most suspicious rank among those
  // silent almost as long: beats are rate-limited, so the rank that stopped may have beaten a
  // moment after a peer that it then blocked, and crosses the limit a tick later.
  const int64_t slack = 2 * limits_.interval_ms;
  auto suspicion = [&](const RankStatus& r) { return std::make_tuple(!r.seen_stopped, r.step, quiet_since(r)); };
  std::optional<size_t> hung;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankStatus& rank = ranks[i];
    if (!watched(rank) || now - quiet_since(rank) <= limit_of(rank) - slack) continue;
    if (!hung || suspicion(rank) < suspicion(ranks[*hung])) hung = i;
  }
  if (!hung) return found;
  const RankStatus& rank = ranks[*hung];
  found.hang = Hang{static_cast<int>(*hung), saving(rank), now - quiet_since(rank), limit_of(rank), most_overdue_ms};
  return found;
}

}  // namespace dtrain::supervisor
