#include "launcher/runlog/control_protocol.h"

#include "launcher/base/strings.h"
#include "launcher/base/json_fields.h"

namespace dtrain {

using nlohmann::json;

namespace {

std::string excerpt(std::string_view text) { return printable(text, 80); }

}  // namespace

Result<ControlRequest> parse_control_request(std::string_view line) {
  json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return Error::user("malformed JSON request '" + excerpt(line) + "'");
  if (!request.is_object()) return Error::user("the request is not a JSON object: '" + excerpt(line) + "'");
  const json* type = json_member(request, "type");
  if (!type || !type->is_string()) return Error::user("the request has no string \"type\"; expected stop or status");
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "stop") {
    const json* checkpoint = json_member(request, "checkpoint");
    if (checkpoint && !checkpoint->is_boolean()) return Error::user("\"checkpoint\" of a stop request must be true or false");
    return ControlRequest{ControlRequestType::stop, checkpoint && checkpoint->get<bool>()};
  }
  if (name == "status") return ControlRequest{ControlRequestType::status};
  return Error::user("unknown request '" + excerpt(name) + "'; expected stop or status");
}

Result<ControlReply> parse_control_reply(std::string_view line) {
  json reply = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) {
    return Error::infra("reply is not a JSON object: '" + excerpt(line) + "'");
  }
  std::string type = json_string(reply, "type");
  ControlReply out;
  if (type == "ok") {
    out.ok = true;
    out.state = json_string(reply, "state");
    std::optional<int64_t> generation = json_int(reply, "generation");
    if (generation && *generation >= -1 && *generation <= INT32_MAX) out.generation = static_cast<int>(*generation);
    return out;
  }
  if (type == "error") {
    out.message = json_string(reply, "message", json_string(reply, "error"));
    if (out.message.empty()) out.message = "the supervisor refused the request without a reason";
    return out;
  }
  return Error::infra("reply has no \"type\" ok or error: '" + excerpt(line) + "'");
}

std::string to_line(const ControlRequest& request) {
  json out{{"type", request.type == ControlRequestType::stop ? "stop" : "status"}};
  if (request.checkpoint) out["checkpoint"] = true;
  return out.dump();
}

std::string to_line(const ControlReply& reply) {
  json out;
  if (reply.ok) {
    out = {{"type", "ok"}, {"state", reply.state}};
    if (reply.generation) out["generation"] = *reply.generation;
  } else {
    out = {{"type", "error"}, {"message", reply.message}};
  }
  return json_compact(out);
}

}  // namespace dtrain
