#include "launcher/metrics/stragglers.h"

#include <algorithm>

namespace dtrain::metrics {

void StragglerDetector::reset(int world_size) {
  ranks_.assign(static_cast<size_t>(std::max(0, world_size)), RankWindow{});
  changed_ = false;
}

void StragglerDetector::add(int rank, int64_t step, double work_ms) {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size() || !(work_ms >= 0)) return;
  RankWindow& window = ranks_[static_cast<size_t>(rank)];
  if (step <= window.last_step) return;
  window.last_step = step;
  if (window.times.size() < options_.window) {
    window.times.push_back(work_ms);
  } else {
    window.times[window.next] = work_ms;
    window.next = (window.next + 1) % options_.window;
  }
  changed_ = true;
}

std::vector<StragglerChange> StragglerDetector::evaluate() {
  std::vector<StragglerChange> changes;
  if (!changed_) return changes;
  changed_ = false;
  std::vector<double> sorted;
  std::optional<double> fastest;
  for (RankWindow& window : ranks_) {
    window.median_ms.reset();
    if (window.times.size() < options_.min_samples) continue;
    sorted = window.times;
    auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), middle, sorted.end());
    window.median_ms = *middle;
    fastest = fastest ? std::min(*fastest, *middle) : *middle;
  }
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankWindow& window = ranks_[i];
    if (!window.median_ms || !fastest) continue;
    double floor = std::max(options_.noise_floor_ms, 1e-3);  // never a division by zero
    window.score = std::min(1.0, std::max(*fastest, floor) / std::max(*window.median_ms, floor));
    bool straggling = *window.score < options_.threshold;
    StragglerChange change{static_cast<int>(i), straggling, *window.score, *window.median_ms, *fastest};
    if (straggling && !window.reported) {
      window.reported = true;
      changes.push_back(change);
    } else if (!straggling && window.straggling && window.reported && !window.cleared) {
      window.cleared = true;
      changes.push_back(change);
    }
    window.straggling = straggling;
  }
  return changes;
}

std::optional<double> StragglerDetector::score(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size()) return std::nullopt;
  return ranks_[static_cast<size_t>(rank)].score;
}

std::optional<double> StragglerDetector::median_ms(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size()) return std::nullopt;
  return ranks_[static_cast<size_t>(rank)].median_ms;
}

bool StragglerDetector::is_straggler(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < ranks_.size() && ranks_[static_cast<size_t>(rank)].straggling;
}

int StragglerDetector::stragglers() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(), [](const RankWindow& w) { return w.straggling; }));
}

}  // namespace dtrain::metrics
