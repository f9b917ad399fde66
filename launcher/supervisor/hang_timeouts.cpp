#include "launcher/supervisor/hang_timeouts.h"

#include <algorithm>
#include <cstdlib>

namespace dtrain::supervisor {

HangTimeouts::HangTimeouts(const spec::JobSpec& spec)
    : heartbeat_(spec.heartbeat), progress_window_(spec.elastic.progress_window) {}

void HangTimeouts::new_generation(int gen, size_t world_size) {
  gen_ = gen;
  changes_.assign(world_size, 0);
  counted_ = 0;
  warmup_longest_ms_ = 0;
}

void HangTimeouts::step_changed(int rank, int64_t quiet_ms) {
  if (rank < 0 || static_cast<size_t>(rank) >= changes_.size() || quiet_ms < 0) return;
  if (++changes_[static_cast<size_t>(rank)] <= kWarmupSteps) {
    warmup_longest_ms_ = std::max(warmup_longest_ms_, quiet_ms);
    return;
  }
  ++counted_;
  longest_step_ms_ = std::max(longest_step_ms_.value_or(0), quiet_ms);
}

void HangTimeouts::save_took(int64_t ms) {
  if (ms >= 0) longest_save_ms_ = std::max(longest_save_ms_.value_or(0), ms);
}

int64_t HangTimeouts::floor_ms() const {
  return std::max(kFloorMinMs, kFloorIntervals * heartbeat_.interval.count());
}

int64_t HangTimeouts::hang_ms() const {
  if (!automatic()) return heartbeat_.hang_timeout.count();
  const int64_t estimate = kFactor * longest_step_ms_.value_or(0);
  if (warming_up()) {
    // Start-up may be slow, and slower after a restart: never less than the initial value, nor
    // than what this run's steps have already shown.
    return std::max({heartbeat_.initial_hang_timeout().count(), estimate, kFactor * warmup_longest_ms_});
  }
  return std::max(floor_ms(), estimate);
}

int64_t HangTimeouts::checkpoint_ms(int64_t hang) const {
  if (!automatic()) return heartbeat_.checkpoint_hang_timeout().count();
  if (heartbeat_.checkpoint_timeout.count() > 0) return std::max(heartbeat_.checkpoint_timeout.count(), hang);
  return std::max({int64_t{600'000}, hang, kFactor * longest_save_ms_.value_or(0)});
}

HangLimits HangTimeouts::limits() const {
  const int64_t hang = hang_ms();
  return {hang, checkpoint_ms(hang), heartbeat_.interval.count()};
}

events::HangTimeoutChanged HangTimeouts::in_force() const {
  const int64_t hang = hang_ms();
  events::HangTimeoutChanged out;
  out.gen = gen_;
  out.hang_timeout_ms = hang;
  out.checkpoint_timeout_ms = checkpoint_ms(hang);
  out.progress_window_ms = progress_window_.count() > 0 ? progress_window_.count() : 2 * hang;
  if (!automatic()) {
    out.basis = events::HangTimeoutChanged::kSpec;
    return out;
  }
  out.factor = kFactor;
  out.longest_step_ms = longest_step_ms_;
  if (warming_up() && warmup_longest_ms_ > 0) out.longest_step_ms = std::max(longest_step_ms_.value_or(0), warmup_longest_ms_);
  out.longest_save_ms = longest_save_ms_;
  if (warming_up()) out.basis = events::HangTimeoutChanged::kWarmUp;
  else if (kFactor * longest_step_ms_.value_or(0) >= floor_ms()) out.basis = events::HangTimeoutChanged::kStepTime;
  else out.basis = events::HangTimeoutChanged::kFloor;
  return out;
}

namespace {

/// More than 25 % away from `before`.
bool moved(int64_t now, int64_t before) { return std::llabs(now - before) * 4 > before; }

}  // namespace

std::optional<events::HangTimeoutChanged> HangTimeouts::take_change() {
  if (!automatic()) return std::nullopt;
  // Called on every step change of every rank: decide on the numbers before building the event.
  const int64_t hang = hang_ms();
  if (taken_ && warming_up() == taken_warm_ && !moved(hang, taken_->hang_timeout_ms) &&
      !moved(checkpoint_ms(hang), taken_->checkpoint_timeout_ms)) {
    return std::nullopt;
  }
  taken_ = in_force();
  taken_warm_ = warming_up();
  return taken_;
}

}  // namespace dtrain::supervisor
