// The event catalogue: names are unique, dtrain(1) documents every one, and catalogue_problem()
// tells a conforming event from one that lacks a field or has an unknown name.

#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "launcher/base/event_catalogue.h"
#include "launcher/runlog/event_log.h"

using namespace dtrain;

TEST_CASE("every catalogue name is unique and documented in dtrain(1)") {
  std::ifstream man(std::string(DTRAIN_SOURCE_DIR) + "/man/dtrain.1");
  REQUIRE(man.good());
  std::stringstream text;
  text << man.rdbuf();
  // groff escapes '-' as '\-'; event names have none, but undo it for the search anyway.
  std::string page = text.str();
  std::set<std::string_view> names;
  for (const events::EventType& type : events::catalogue()) {
    CHECK_MESSAGE(names.insert(type.name).second, "duplicate: " << type.name);
    CHECK_MESSAGE(page.find(std::string(type.name)) != std::string::npos, type.name << " is not in man/dtrain.1");
    CHECK(!type.meaning.empty());
  }
  CHECK(names.size() >= 40);
}

TEST_CASE("catalogue_problem: conforming, unknown name, missing fields") {
  nlohmann::json lost = {{"ev", "host.lost"}, {"host", "h1"}, {"reason", "silent"}, {"was_connected", true}};
  CHECK(catalogue_problem(lost).empty());
  lost.erase("reason");
  CHECK(catalogue_problem(lost) == "host.lost lacks \"reason\"");
  CHECK(catalogue_problem({{"ev", "host.gone"}}) == "\"host.gone\" is not in the event catalogue");
  CHECK(catalogue_problem(nlohmann::json::object()) == "\"\" is not in the event catalogue");
}
