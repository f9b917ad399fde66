#include "launcher/supervisor/generation.h"

namespace dtrain::supervisor {

Generation make_generation(int number, size_t world_size, int64_t now_ms, int64_t start_step,
                           int64_t start_checkpoint, const spec::JobSpec& spec, const std::map<int, int>& carried) {
  Generation generation;
  generation.number = number;
  generation.ranks.assign(world_size, RankStatus{});
  for (size_t i = 0; i < world_size; ++i) {
    RankStatus& rank = generation.ranks[i];
    auto survivor = carried.find(static_cast<int>(i));
    if (survivor == carried.end()) {
      rank.state = RankState::starting;
      continue;
    }
    rank.state = RankState::running;
    rank.pid = survivor->second;
    ++generation.started;
  }
  generation.started_ms = now_ms;
  generation.start_step = start_step;
  generation.start_checkpoint = start_checkpoint;
  generation.hangs = HangDetector(HangLimits::of(spec.heartbeat), now_ms);
  return generation;
}

}  // namespace dtrain::supervisor
