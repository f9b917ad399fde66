#pragma once
// A plan record read back (launcher/runlog/plan_record.h) as one line of text, for comparing two
// reads of one file: the plan_record fuzz target and runlog_plan_record_test compare the read
// that keeps the JSON with the faster one that does not.

#include <string>

#include "launcher/runlog/plan_record.h"

namespace dtrain::fuzz {

/// Every field `dtrain status` reads, or "error: <message>".
inline std::string describe_plan_record(const Result<PlanRecord>& read) {
  if (!read) return "error: " + read.error().message;
  const PlanRecord& plan = *read;
  std::string text = "gen " + std::to_string(plan.generation) + " world " + std::to_string(plan.world_size) + " " +
                     std::to_string(plan.data) + "x" + std::to_string(plan.pipeline) + "x" + std::to_string(plan.tensor) +
                     " batch " + std::to_string(plan.global_batch) + "/" + std::to_string(plan.micro_batch) + "/" +
                     std::to_string(plan.grad_accum);
  for (const std::string& host : plan.without) text += " -" + host;
  for (const std::string& host : plan.spares_used) text += " +" + host;
  for (const PlanRecord::Host& host : plan.hosts) {
    text += " | " + host.name + (host.spare ? " (spare)" : "");
    for (const PlanRecord::Rank& rank : host.ranks) {
      text += " " + std::to_string(rank.rank) + "(" + std::to_string(rank.dp) + "," + std::to_string(rank.pp) + "," +
              std::to_string(rank.tp) + ")";
    }
  }
  return text;
}

}  // namespace dtrain::fuzz
