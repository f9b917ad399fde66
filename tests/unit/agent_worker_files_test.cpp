// The agent's worker files (launcher/agent/worker_files.h): the embedded Python bootstrap it
// writes, PYTHONPATH, and the error record it reads from a file a worker controls; and the exit
// message's error field as the supervisor parses it.

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "launcher/agent/worker_files.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/messages.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::prepend_python_path;
using dtrain::agent::take_error_record;
using dtrain::agent::WorkerFiles;
using nlohmann::json;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool exists(const std::string& path) {
  struct stat info{};
  return ::lstat(path.c_str(), &info) == 0;
}

}  // namespace

TEST_CASE("worker files: the bootstrap is written byte for byte from worker/python and removed with the files") {
  dtrain::testing::TempDir dir;
  std::string root = dir.path + "/host.files";
  {
    auto files = WorkerFiles::create(root);
    REQUIRE(files.ok());
    CHECK(read(files->python_path() + "/sitecustomize.py") ==
          read(DTRAIN_SOURCE_DIR "/worker/python/bootstrap/sitecustomize.py"));
    for (const char* module : {"dtrain_worker.py", "dtrain_worker_in_place.py", "dtrain_worker_store.py"}) {
      CHECK(read(files->python_path() + "/" + module) == read(std::string(DTRAIN_SOURCE_DIR "/worker/python/") + module));
    }
    CHECK(files->error_file(3, 7) == root + "/error-g3-r7.json");
    std::ofstream(files->error_file(3, 7)) << "{}";
    ::mkdir((files->python_path() + "/__pycache__").c_str(), 0700);
    struct stat info{};
    REQUIRE(::stat(root.c_str(), &info) == 0);
    CHECK((info.st_mode & 0777) == 0700);
  }
  CHECK_FALSE(exists(root));
}

TEST_CASE("worker files: PYTHONPATH puts the bootstrap first and keeps what the worker had") {
  CHECK(prepend_python_path("/run/a.files/python", "") == "/run/a.files/python");
  CHECK(prepend_python_path("/run/a.files/python", "/home/u/lib:/opt") == "/run/a.files/python:/home/u/lib:/opt");
}

TEST_CASE("error record: torch's @record format becomes {type, message, traceback, timestamp}, and the file is gone") {
  dtrain::testing::TempDir dir;
  std::string path = dir.write("e.json", R"({"message": {"message": "ValueError: bad batch: row 3", "extraInfo":
      {"py_callstack": "Traceback...\nValueError: bad batch: row 3\n", "timestamp": "1700000000"}}})");
  auto record = take_error_record(path, 1 << 16);
  REQUIRE(record.has_value());
  CHECK(record->type == "ValueError");
  CHECK(record->message == "bad batch: row 3");
  CHECK(record->traceback == "Traceback...\nValueError: bad batch: row 3\n");
  CHECK(record->timestamp == 1700000000);
  CHECK_FALSE(exists(path));

  // A plain string message (torch's format for errors without a Python exception), no type.
  auto plain = take_error_record(dir.write("p.json", R"({"message": "segfault in worker"})"), 1 << 16);
  REQUIRE(plain.has_value());
  CHECK(plain->message == "segfault in worker");
  CHECK_FALSE(plain->type.has_value());
  CHECK_FALSE(plain->traceback.has_value());
}

TEST_CASE("error record: whatever else a worker leaves there is no record, and nothing throws") {
  dtrain::testing::TempDir dir;
  for (const char* text : {"", "not json", "[1,2]", "{}", R"({"message": 3})", R"({"message": {"message": null}})",
                           R"({"message": {"extraInfo": {}}})", "{\"message\": \"\xff\xfe\"}"}) {
    CAPTURE(text);
    CHECK_FALSE(take_error_record(dir.write("bad.json", text), 1 << 16).has_value());
  }
  // Odd extraInfo fields are dropped, the message kept.
  auto odd = take_error_record(
      dir.write("odd.json", R"({"message": {"message": "x", "extraInfo": {"py_callstack": 5, "timestamp": "soon"}}})"),
      1 << 16);
  REQUIRE(odd.has_value());
  CHECK(*odd == dtrain::proto::WorkerErrorRecord{std::nullopt, "x", std::nullopt, std::nullopt});
  // Over the cap: not read. Absent, a directory, a FIFO (must not block), a symlink: none.
  CHECK_FALSE(take_error_record(dir.write("big.json", R"({"message": ")" + std::string(100, 'a') + "\"}"), 64).has_value());
  CHECK_FALSE(take_error_record(dir.path + "/absent.json", 1 << 16).has_value());
  ::mkdir((dir.path + "/d.json").c_str(), 0700);
  CHECK_FALSE(take_error_record(dir.path + "/d.json", 1 << 16).has_value());
  REQUIRE(::mkfifo((dir.path + "/f.json").c_str(), 0600) == 0);
  CHECK_FALSE(take_error_record(dir.path + "/f.json", 1 << 16).has_value());
  std::string target = dir.write("target.json", R"({"message": "secret"})");
  REQUIRE(::symlink(target.c_str(), (dir.path + "/l.json").c_str()) == 0);
  CHECK_FALSE(take_error_record(dir.path + "/l.json", 1 << 16).has_value());
}

TEST_CASE("exit.error: parsed with checks — a mistyped field is a protocol error naming it") {
  json exit = {{"type", "exit"}, {"gen", 0}, {"rank", 1}, {"pid", 2}, {"code", 1},
               {"error", {{"type", "ValueError"}, {"message", "bad batch"}, {"traceback", "tb"}, {"timestamp", 5}}}};
  auto parsed = dtrain::proto::parse_agent_message(exit);
  REQUIRE(parsed.ok());
  const auto& report = std::get<dtrain::proto::WorkerExitReport>(*parsed);
  REQUIRE(report.error.has_value());
  CHECK(report.error->type == "ValueError");
  CHECK(report.error->message == "bad batch");
  CHECK(report.error->traceback == "tb");
  CHECK(report.error->timestamp == 5);

  exit.erase("error");
  parsed = dtrain::proto::parse_agent_message(exit);
  REQUIRE(parsed.ok());
  CHECK_FALSE(std::get<dtrain::proto::WorkerExitReport>(*parsed).error.has_value());

  for (json bad : {json("text"), json({{"type", "T"}}), json({{"message", 3}}), json({{"message", "m"}, {"traceback", 1}}),
                   json({{"message", "m"}, {"timestamp", -1}}),
                   json({{"message", std::string(dtrain::proto::kMaxErrorFileBytes + 1, 'x')}})}) {
    exit["error"] = bad;
    auto refused = dtrain::proto::parse_agent_message(exit);
    CAPTURE(bad.dump().substr(0, 80));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("exit.error") != std::string::npos);
  }
}
