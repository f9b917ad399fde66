#pragma once
// Invariants shared by the message targets (agent_frame, worker_line): what an accepted worker
// message must satisfy, and that error messages carry no raw control bytes.

#include <string>
#include <variant>

#include "fuzz/fuzz_check.h"
#include "launcher/base/strings.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/worker_messages.h"

namespace dtrain::fuzz {

/// Error text reaches terminals and events.jsonl: a NUL would cut it, an escape sequence would
/// reach the terminal. Parsers show untrusted bytes through dtrain::printable().
inline void check_printable(const std::string& message, const char* what) {
  for (unsigned char c : message) {
    check(c >= 0x20 && c != 0x7f, what, printable(message, 200));
  }
}

/// An accepted worker message has its canonical JSON (what the agent forwards), that JSON parses
/// back to a message with the same canonical JSON and type, and so does its serialised line.
inline void check_worker_message(const proto::WorkerMessage& message) {
  nlohmann::json canonical = proto::to_json(message);
  check(canonical.is_object() && canonical.value("type", "") == proto::type_of(message),
        "the canonical JSON carries the message's type", canonical.dump());
  auto again = proto::parse_worker_message(canonical);
  check(again.ok(), "the canonical JSON parses again", canonical.dump() + (again ? "" : " → " + again.error().message));
  check(proto::to_json(*again) == canonical, "the canonical JSON is a fixed point", canonical.dump());
  std::string line = canonical.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto from_line = proto::parse_worker_line(line);
  check(from_line && proto::to_json(*from_line) == canonical, "the canonical line parses back", line);
  if (const auto* beat = std::get_if<proto::WorkerBeat>(&message)) {
    check(beat->step >= 0, "a beat's step is not negative", std::to_string(beat->step));
  }
  if (const auto* wait = std::get_if<proto::KvWaitRequest>(&message)) {
    check(wait->keys.size() <= proto::kMaxWorkerWaitKeys, "kv.wait keys are bounded");
  }
}

/// Every field of a parsed agent message that the fast and generic paths must agree on, as text:
/// the error, or the message's type and, for a beat or a from_worker, all of its fields.
inline std::string describe_agent_message(const Result<proto::AgentMessage>& parsed) {
  if (!parsed) return "error: " + parsed.error().message;
  auto from_worker = [](const proto::FromWorker& from) {
    nlohmann::json out = {{"gen", from.gen}, {"rank", from.rank}, {"pid", from.pid ? nlohmann::json(*from.pid) : nlohmann::json()}};
    if (from.msg) out["msg"] = proto::to_json(*from.msg);
    else out["error"] = from.msg.error().message;
    if (from.failed_request_id) out["failed_request_id"] = *from.failed_request_id;
    return out;
  };
  nlohmann::json out = {{"index", parsed->index()}};
  if (const auto* from = std::get_if<proto::FromWorker>(&*parsed)) out["from_worker"] = from_worker(*from);
  if (const auto* beat = std::get_if<proto::AgentBeat>(&*parsed)) {
    auto optional = [](const auto& value) { return value ? nlohmann::json(*value) : nlohmann::json(); };
    out["agent_time_ms"] = optional(beat->agent_time_ms);
    out["load1"] = optional(beat->load1);
    out["mem_available_mb"] = optional(beat->mem_available_mb);
    for (const proto::AgentWorkerState& worker : beat->workers) {
      out["workers"].push_back({worker.gen, worker.rank, worker.pid, worker.alive, worker.state});
    }
    for (const proto::FromWorker& held : beat->worker_beats) out["worker_beats"].push_back(from_worker(held));
    if (beat->resources) out["resources"] = proto::to_json(*beat->resources);
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dtrain::fuzz
