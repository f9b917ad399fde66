#include "launcher/proto/relay_messages.h"

#include <limits>

#include "launcher/base/base64.h"
#include "launcher/proto/messages.h"

namespace dtrain::proto {

using nlohmann::json;

namespace {

constexpr size_t kMaxHostBytes = kMaxRelayHostBytes;
constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxReasonBytes = kMaxRelayReasonBytes;
constexpr size_t kMaxEncodedChunk = kMaxRelayEncodedChunkBytes;

std::string read_data(FieldReader& reader, std::string_view key, bool required) {
  std::optional<std::string> text =
      required ? std::optional<std::string>(reader.string(key, kMaxEncodedChunk)) : reader.optional_string(key, kMaxEncodedChunk);
  std::string bytes;
  if (text && reader.ok() && !base64_decode(*text, bytes)) reader.fail_text(key, "not base64");
  return bytes;
}

int read_port(FieldReader& reader, std::string_view key) {
  return static_cast<int>(reader.optional_integer(key, 0, 65'535).value_or(0));
}

}  // namespace

json relay_to_json(const RelayOpenRequest& m) {
  json children = json::array();
  for (const RelayChild& child : m.children) {
    children.push_back({{"host", child.host}, {"user", child.user}, {"port", child.port}, {"dtrain_path", child.dtrain_path}});
  }
  const RelaySsh& ssh = m.ssh;
  return {{"type", msg::kRelayOpen},
          {"ssh",
           {{"client", ssh.client},
            {"user", ssh.user},
            {"port", ssh.port},
            {"identity_files", ssh.identity_files},
            {"use_agent", ssh.use_agent},
            {"known_hosts", ssh.known_hosts},
            {"host_key_policy", ssh.host_key_policy},
            {"connect_timeout_ms", ssh.connect_timeout_ms},
            {"provision_timeout_ms", ssh.provision_timeout_ms},
            {"max_parallel", ssh.max_parallel},
            {"remote_dtrain", ssh.remote_dtrain},
            {"openssh_config", ssh.openssh_config},
            {"openssh_program", ssh.openssh_program}}},
          {"children", std::move(children)}};
}

json relay_to_json(const RelayToRequest& m) {
  return {{"type", msg::kRelayTo}, {"host", m.host}, {"data", base64_encode(m.data)}};
}

json relay_to_json(const RelayFanoutRequest& m) {
  return {{"type", msg::kRelayFanout}, {"hosts", m.hosts}, {"data", base64_encode(m.data)}};
}

json relay_to_json(const RelayCloseRequest& m) { return {{"type", msg::kRelayClose}, {"host", m.host}}; }

json relay_to_json(const RelayFromReport& m) {
  json out = {{"type", msg::kRelayFrom}, {"host", m.host}};
  if (!m.data.empty()) out["data"] = base64_encode(m.data);
  if (!m.diagnostics.empty()) out["diagnostics"] = m.diagnostics;
  return out;
}

json relay_to_json(const RelayClosedReport& m) {
  return {{"type", msg::kRelayClosed}, {"host", m.host}, {"reason", m.reason}};
}

Result<RelayOpenRequest> parse_relay_open(FieldReader& reader) {
  RelayOpenRequest open;
  if (const json* ssh_object = reader.object("ssh")) {
    FieldReader ssh("relay_open.ssh", *ssh_object);
    RelaySsh& out = open.ssh;
    out.client = ssh.string("client", 16);
    if (ssh.ok() && out.client != "libssh2" && out.client != "openssh") {
      ssh.fail_text("client", "expected \"libssh2\" or \"openssh\", got \"" + out.client.substr(0, 16) + "\"");
    }
    out.user = ssh.optional_string("user", kMaxHostBytes).value_or("");
    out.port = read_port(ssh, "port");
    out.identity_files = ssh.optional_string_array("identity_files", 64, kMaxPathBytes).value_or(std::vector<std::string>{});
    out.use_agent = ssh.optional_boolean("use_agent").value_or(true);
    out.known_hosts = ssh.optional_string("known_hosts", kMaxPathBytes).value_or("");
    out.host_key_policy = ssh.optional_string("host_key_policy", 16).value_or("strict");
    if (ssh.ok() && out.host_key_policy != "strict" && out.host_key_policy != "accept-new" &&
        out.host_key_policy != "insecure") {
      ssh.fail_text("host_key_policy", "expected \"strict\", \"accept-new\" or \"insecure\"");
    }
    out.connect_timeout_ms = ssh.optional_integer("connect_timeout_ms", 1).value_or(10'000);
    out.provision_timeout_ms = ssh.optional_integer("provision_timeout_ms", 1).value_or(120'000);
    out.max_parallel = static_cast<int>(ssh.optional_integer("max_parallel", 1, 100'000).value_or(64));
    out.remote_dtrain = ssh.optional_string("remote_dtrain", kMaxPathBytes).value_or("");
    out.openssh_config = ssh.optional_string("openssh_config", kMaxPathBytes).value_or("");
    out.openssh_program = ssh.optional_string("openssh_program", kMaxPathBytes).value_or("ssh");
    if (!ssh.ok()) return ssh.error();
  }
  const json* children = reader.optional_array("children");
  if (children == nullptr && reader.ok()) reader.fail_text("children", "missing (expected an array of {host, user, port, dtrain_path})");
  if (!reader.ok()) return reader.error();
  if (children->size() > kMaxRelayChildren) {
    reader.fail_text("children", "more than " + std::to_string(kMaxRelayChildren) + " children");
    return reader.error();
  }
  for (const json& item : *children) {
    FieldReader entry("relay_open.children[]", item);
    RelayChild child;
    child.host = entry.string("host", kMaxHostBytes);
    if (entry.ok() && child.host.empty()) entry.fail_text("host", "empty");
    child.user = entry.optional_string("user", kMaxHostBytes).value_or("");
    child.port = read_port(entry, "port");
    child.dtrain_path = entry.optional_string("dtrain_path", kMaxPathBytes).value_or("");
    if (!entry.ok()) return entry.error();
    open.children.push_back(std::move(child));
  }
  return open;
}

Result<RelayToRequest> parse_relay_to(FieldReader& reader) {
  RelayToRequest to;
  to.host = reader.string("host", kMaxHostBytes);
  to.data = read_data(reader, "data", true);
  if (!reader.ok()) return reader.error();
  return to;
}

Result<RelayFanoutRequest> parse_relay_fanout(FieldReader& reader) {
  RelayFanoutRequest fanout;
  fanout.hosts = reader.string_array("hosts", kMaxRelayChildren, kMaxHostBytes);
  fanout.data = read_data(reader, "data", true);
  if (!reader.ok()) return reader.error();
  return fanout;
}

Result<RelayCloseRequest> parse_relay_close(FieldReader& reader) {
  RelayCloseRequest close{reader.string("host", kMaxHostBytes)};
  if (!reader.ok()) return reader.error();
  return close;
}

Result<RelayFromReport> parse_relay_from(FieldReader& reader) {
  RelayFromReport from;
  from.host = reader.string("host", kMaxHostBytes);
  from.data = read_data(reader, "data", false);
  from.diagnostics = reader.optional_string("diagnostics", kMaxReasonBytes).value_or("");
  if (!reader.ok()) return reader.error();
  return from;
}

Result<RelayClosedReport> parse_relay_closed(FieldReader& reader) {
  RelayClosedReport closed{reader.string("host", kMaxHostBytes), reader.string("reason", kMaxReasonBytes)};
  if (!reader.ok()) return reader.error();
  return closed;
}

}  // namespace dtrain::proto
