// The agent's health checks over its framed stdio (issue 29): a real `dtrain agent` with
// config.health answers health {id 0} after hello and every health request with its id, while
// its heartbeats go on; a site command held on a FIFO shows that the checks run off the loop.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "launcher/base/fd.h"
#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"
#include "tests/unit/temp_dir.h"

using dtrain::test::AgentSession;
using nlohmann::json;

namespace {

/// Hands `line` to the site command waiting in `read line < fifo` (blocks until it reads).
void answer_site_command(const std::string& fifo, const std::string& line) {
  dtrain::UniqueFd writer(::open(fifo.c_str(), O_WRONLY | O_CLOEXEC));
  REQUIRE(writer.valid());
  REQUIRE(dtrain::write_all(writer.get(), line + "\n").ok());
}

const json* check_named(const json& reply, const std::string& name) {
  for (const json& check : reply["report"]["checks"]) {
    if (check["name"] == name) return &check;
  }
  return nullptr;
}

/// Waits for `count` more beats, and says whether no health reply with `id` came meanwhile.
bool beats_without_reply(AgentSession& session, int count, int64_t id) {
  for (int i = 0; i < count; ++i) {
    if (!session.wait_for_type("beat", 10'000)) return false;
  }
  for (const json& message : session.history()) {
    if (message["type"] == "health" && message["id"] == id) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("config.health: the start report follows hello, a request is answered with its id, beats go on meanwhile") {
  dtrain::testing::TempDir dir;
  std::string fifo = dir.path + "/site-check";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string values = dir.write("nvml", "gpus=1\n");
  ::setenv("DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML, 1);
  ::setenv("DTRAIN_FAKE_NVML_VALUES", values.c_str(), 1);
  AgentSession session(DTRAIN_EXE);
  ::unsetenv("DTRAIN_NVML_LIBRARY");
  ::unsetenv("DTRAIN_FAKE_NVML_VALUES");
  json health = {{"checkpoint_dir", dir.path + "/checkpoints"},
                 {"master_addr", "127.0.0.1"},
                 {"command", "read line < " + fifo + "; echo \"$line\"; [ \"$line\" = healthy ]"},
                 {"command_timeout_ms", 120'000},
                 {"min_free_mb", 0},
                 {"reclaim_wait_ms", 0}};
  REQUIRE(session.handshake({{"heartbeat_interval_ms", 100}, {"health", health}}));

  // The start check waits in the site command: the agent's loop does not.
  CHECK(beats_without_reply(session, 3, 0));
  answer_site_command(fifo, "healthy");
  std::optional<json> start = session.wait_for_type("health", 30'000);
  REQUIRE(start);
  CHECK((*start)["id"] == 0);
  CHECK((*start)["report"]["moment"] == "start");
  const json* site = check_named(*start, "site command");
  REQUIRE(site != nullptr);
  CHECK((*site)["verdict"] == "ok");
  CHECK((*site)["message"] == "exit 0: healthy");
  const json* checkpoint = check_named(*start, "checkpoint dir");
  REQUIRE(checkpoint != nullptr);
  CHECK((*checkpoint)["verdict"] == "ok");
  CHECK(check_named(*start, "master interface") != nullptr);
  const json* gpu = check_named(*start, "gpu 0");
  REQUIRE(gpu != nullptr);
  CHECK((*gpu)["verdict"] == "ok");

  // An Xid the sampler saw (it rides on a beat) is the next check's news.
  std::ofstream(values) << "gpus=1\nxid=0:79\n";
  REQUIRE(session.wait_for(
      [](const json& m) {
        if (m["type"] != "beat" || !m.contains("resources") || !m["resources"].contains("xids")) return false;
        for (const json& xid : m["resources"]["xids"]) {
          if (xid["xid"] == 79) return true;
        }
        return false;
      },
      30'000));

  session.send({{"type", "health"}, {"id", 7}, {"moment", "join"}, {"diagnose", false}});
  CHECK(beats_without_reply(session, 3, 7));
  answer_site_command(fifo, "sick");
  std::optional<json> joined = session.wait_for_type("health", 30'000);
  REQUIRE(joined);
  CHECK((*joined)["id"] == 7);
  CHECK((*joined)["report"]["moment"] == "join");
  site = check_named(*joined, "site command");
  REQUIRE(site != nullptr);
  CHECK((*site)["verdict"] == "fail");
  CHECK((*site)["message"] == "unhealthy (exit 1): sick");
  gpu = check_named(*joined, "gpu 0");
  REQUIRE(gpu != nullptr);
  CHECK((*gpu)["verdict"] == "fail");
  CHECK((*gpu)["message"].get<std::string>().find("Xid 79") != std::string::npos);

  session.connection().shutdown(5000);
  CHECK(session.decode_error() == "");
}

TEST_CASE("an agent whose health check hangs in a site command still exits when told, and the command with it") {
  dtrain::testing::TempDir dir;
  std::string fifo = dir.path + "/never-answered";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string pid_file = dir.path + "/command.pid";
  AgentSession session(DTRAIN_EXE);
  json health = {{"command", "echo $$ > " + pid_file + "; read line < " + fifo}, {"command_timeout_ms", 600'000}};
  REQUIRE(session.handshake({{"health", health}}));
  // The command has started (it wrote its pid) and waits for ever; the agent beats meanwhile.
  pid_t command = 0;
  for (int beats = 0; command == 0 && beats < 100 && session.wait_for_type("beat", 10'000); ++beats) {
    dtrain::Result<std::string> text = dtrain::read_file(pid_file);
    if (text && text->find('\n') != std::string::npos) command = static_cast<pid_t>(std::stol(*text));
  }
  REQUIRE(command > 0);
  session.send({{"type", "fence"}, {"reason", "test over"}});
  CHECK(session.wait_closed(15'000));
  CHECK_MESSAGE(dtrain::test::wait_until_gone(command, 5'000), dtrain::test::describe_process(command));
}
