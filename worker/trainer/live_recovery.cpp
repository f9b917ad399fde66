#include "worker/trainer/live_recovery.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

namespace dtrain::trainer {
namespace {

constexpr const char* kReportPrefix = "live/state/";
// Every error ends the same way: the worker exits and the supervisor takes the other road.
constexpr const char* kFallback = "; in-place recovery is impossible, so this worker exits and the supervisor "
                                  "restarts every rank from the newest checkpoint";

std::string encode_report(const RankReport& report) {
  return std::to_string(report.completed) + " " + std::to_string(report.kept) + " " + std::to_string(report.tp) +
         " " + std::to_string(report.pp) + " " + std::to_string(report.dp);
}

worker::Result<RankReport> decode_report(int rank, const std::string& text) {
  RankReport report;
  report.rank = rank;
  long long completed = 0, kept = 0;
  if (std::sscanf(text.c_str(), "%lld %lld %d %d %d", &completed, &kept, &report.tp, &report.pp, &report.dp) != 5) {
    return worker::Error{"in-place recovery: rank " + std::to_string(rank) + " published an unreadable state report '" +
                         text + "'"};
  }
  report.completed = completed;
  report.kept = kept;
  return report;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

}  // namespace

void KeptState::keep(int64_t step, const std::vector<float>& params, const std::vector<float>& velocity) {
  params_.resize(params.size());
  velocity_.resize(velocity.size());
  std::memcpy(params_.data(), params.data(), params.size() * sizeof(float));
  std::memcpy(velocity_.data(), velocity.data(), velocity.size() * sizeof(float));
  step_ = step;
}

void KeptState::restore_into(std::vector<float>& params, std::vector<float>& velocity) const {
  params = params_;
  velocity = velocity_;
}

worker::Result<AgreementPlan> plan_agreement(const std::vector<RankReport>& reports, int my_rank) {
  std::optional<int64_t> target;
  for (const RankReport& report : reports) {
    if (report.completed >= 0) target = std::min(target.value_or(report.completed), report.completed);
  }
  if (!target) {
    return worker::Error{"in-place recovery: no rank has a state to continue from (all " +
                         std::to_string(reports.size()) + " are replacements)" + kFallback};
  }
  for (const RankReport& report : reports) {
    if (report.completed > *target + 1) {
      return worker::Error{"in-place recovery: rank " + std::to_string(report.rank) + " completed step " +
                           std::to_string(report.completed) + ", more than one step after step " +
                           std::to_string(*target) + " (the oldest step a surviving rank completed), and a rank "
                           "can roll back one step only" + kFallback};
    }
    if (report.completed == *target + 1 && report.kept != *target) {
      return worker::Error{"in-place recovery: rank " + std::to_string(report.rank) + " completed step " +
                           std::to_string(report.completed) + " but kept no state of step " + std::to_string(*target) +
                           " to roll back to" + kFallback};
    }
  }
  // The data-parallel groups: the replicas of one (tp, pp) shard, by dp index.
  std::map<std::pair<int, int>, std::map<int, const RankReport*>> groups;
  for (const RankReport& report : reports) groups[{report.tp, report.pp}][report.dp] = &report;
  for (const auto& [shard, members] : groups) {
    bool has_state = std::any_of(members.begin(), members.end(), [](const auto& m) { return m.second->completed >= 0; });
    if (has_state) continue;
    std::vector<int> ranks;
    for (const auto& member : members) ranks.push_back(member.second->rank);
    return worker::Error{"in-place recovery: every replica of the shard tp " + std::to_string(shard.first) + " pp " +
                         std::to_string(shard.second) + " (ranks " + rank_list(ranks) +
                         ") is a replacement, so no live rank holds its parameters" + kFallback};
  }
  const RankReport& me = reports.at(static_cast<size_t>(my_rank));
  AgreementPlan plan;
  plan.step = *target;
  plan.roll_back = me.completed == *target + 1;
  for (const auto& [dp, member] : groups.at({me.tp, me.pp})) {
    if (member->completed < 0) continue;
    plan.source_dp = dp;
    plan.source_rank = member->rank;
    break;
  }
  return plan;
}

worker::Result<AgreementPlan> agree_on_state(worker::KvClient& kv, const worker::Topology& me, Staging& data,
                                             int64_t completed, KeptState& kept, std::vector<float>& params,
                                             std::vector<float>& velocity, worker::Millis timeout) {
  RankReport mine{me.rank, completed, completed >= 0 ? kept.step() : -1, me.tp_rank, me.pp_rank, me.dp_rank};
  if (worker::Status published = kv.set(kReportPrefix + std::to_string(me.rank), encode_report(mine)); !published) {
    return worker::Error{"in-place recovery: publishing this rank's state: " + published.error().message};
  }
  std::vector<std::string> keys;
  for (int rank = 0; rank < me.world_size; ++rank) keys.push_back(kReportPrefix + std::to_string(rank));
  worker::Result<std::vector<std::string>> texts = kv.wait(keys, timeout);
  if (!texts) return worker::Error{"in-place recovery: the other ranks' states: " + texts.error().message};
  std::vector<RankReport> reports;
  for (int rank = 0; rank < me.world_size; ++rank) {
    worker::Result<RankReport> report = decode_report(rank, (*texts)[static_cast<size_t>(rank)]);
    if (!report) return report.error();
    reports.push_back(*report);
  }
  worker::Result<AgreementPlan> plan = plan_agreement(reports, me.rank);
  if (!plan) return plan;
  if (plan->roll_back) kept.restore_into(params, velocity);
  // One buffer, one broadcast: parameters then momentum. Every replica of a shard receives it
  // (those that hold the same state too: it costs one broadcast and makes "same" a fact).
  std::vector<float> state(params.size() + velocity.size());
  std::copy(params.begin(), params.end(), state.begin());
  std::copy(velocity.begin(), velocity.end(), state.begin() + static_cast<std::ptrdiff_t>(params.size()));
  if (worker::Status sent = data.broadcast(state.data(), state.size() * sizeof(float), plan->source_dp, timeout); !sent) {
    return worker::Error{"in-place recovery: the state of step " + std::to_string(plan->step) + " from rank " +
                         std::to_string(plan->source_rank) + ": " + sent.error().message};
  }
  std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(params.size()), params.begin());
  std::copy(state.begin() + static_cast<std::ptrdiff_t>(params.size()), state.end(), velocity.begin());
  kept.forget();
  return plan;
}

}  // namespace dtrain::trainer
