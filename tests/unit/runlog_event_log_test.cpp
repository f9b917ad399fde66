#include <doctest/doctest.h>

#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/line_follower.h"

using namespace dtrain;
using nlohmann::json;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/dtrain-events-test-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// Appends in place, as a writer does (followers keep the file open).
void append_raw(const std::string& path, const std::string& bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(write_all(fd.get(), bytes).ok());
}

const int64_t kWall = 1'795'995'662'120;  // 2026-11-29T23:41:02.120Z

}  // namespace

TEST_CASE("the event log starts with a versioned header and appends ts-first lines") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  Result<EventLog> log = EventLog::create(path, "train-1", kWall);
  REQUIRE(log.ok());
  REQUIRE(log->append({{"ev", "worker.exit"}, {"rank", 2}, {"signal", "SIGKILL"}}, kWall).ok());
  REQUIRE(log->append({{"ev", "run.finished"}, {"state", "failed"}, {"ts", "ignored"}}, kWall + 1).ok());

  std::string text = *read_file(path);
  CHECK(text ==
        "{\"dtrain_events\":1,\"run_id\":\"train-1\",\"created\":\"2026-11-29T23:41:02.120Z\"}\n"
        "{\"ts\":\"2026-11-29T23:41:02.120Z\",\"ev\":\"worker.exit\",\"rank\":2,\"signal\":\"SIGKILL\"}\n"
        "{\"ts\":\"2026-11-29T23:41:02.121Z\",\"ev\":\"run.finished\",\"state\":\"failed\"}\n");

  Result<std::vector<json>> events = read_events(path);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 2);
  CHECK((*events)[0]["ev"] == "worker.exit");
  CHECK((*events)[0]["rank"] == 2);
  CHECK((*events)[1]["state"] == "failed");

  // An event without a name is a bug in the caller, refused rather than written.
  Status nameless = log->append({{"rank", 1}}, kWall);
  CHECK_FALSE(nameless.ok());
  CHECK(nameless.error().kind == ErrorKind::internal);
  // Creating over an existing log would destroy a run's history.
  CHECK_FALSE(EventLog::create(path, "train-1", kWall).ok());
}

TEST_CASE("a truncated final line is skipped and a corrupt middle line is reported with its number") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  {
    Result<EventLog> log = EventLog::create(path, "r", kWall);
    REQUIRE(log.ok());
    REQUIRE(log->append({{"ev", "a"}}, kWall).ok());
  }
  append_raw(path, "{\"ts\":\"2026-11-29T23:41:02.1");  // writer killed mid-line
  Result<std::vector<json>> events = read_events(path);
  REQUIRE(events.ok());
  CHECK(events->size() == 1);

  append_raw(path, "\n{\"ts\":\"x\",\"ev\":\"b\"}\n");  // the broken line is now line 3 of 4
  Result<std::vector<json>> corrupt = read_events(path);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.error().message.find(path + ":3: corrupt event line") != std::string::npos);
}

TEST_CASE("an unknown header version or a missing header is a clear error") {
  TempDir dir;
  std::string newer = dir.path + "/newer.jsonl";
  REQUIRE(write_file_atomic(newer, "{\"dtrain_events\":2,\"run_id\":\"r\"}\n{\"ev\":\"a\"}\n").ok());
  Result<std::vector<json>> events = read_events(newer);
  REQUIRE_FALSE(events.ok());
  CHECK(events.error().message.find("version 2") != std::string::npos);

  std::string headless = dir.path + "/headless.jsonl";
  REQUIRE(write_file_atomic(headless, "{\"ts\":\"x\",\"ev\":\"a\"}\n").ok());
  Result<std::vector<json>> no_header = read_events(headless);
  REQUIRE_FALSE(no_header.ok());
  CHECK(no_header.error().message.find(headless + ":1: not a dtrain event log") != std::string::npos);

  CHECK_FALSE(read_events(dir.path + "/missing.jsonl").ok());
  CHECK_FALSE(EventLog::open_existing(newer).ok());
}

TEST_CASE("open_existing cuts a truncated last line and appends after it") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  {
    Result<EventLog> log = EventLog::create(path, "r", kWall);
    REQUIRE(log.ok());
    REQUIRE(log->append({{"ev", "a"}}, kWall).ok());
  }
  append_raw(path, "{\"ts\":\"half");
  Result<EventLog> resumed = EventLog::open_existing(path);
  REQUIRE(resumed.ok());
  REQUIRE(resumed->append({{"ev", "b"}}, kWall).ok());
  Result<std::vector<json>> events = read_events(path);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 2);
  CHECK((*events)[1]["ev"] == "b");
}

TEST_CASE("the event follower returns only events appended since its last poll") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  EventFollower follower(path);
  CHECK(follower.poll()->empty());  // not created yet: nothing, not an error

  Result<EventLog> log = EventLog::create(path, "r", kWall);
  REQUIRE(log.ok());
  CHECK(follower.poll()->empty());  // header only
  REQUIRE(log->append({{"ev", "a"}}, kWall).ok());
  REQUIRE(log->append({{"ev", "b"}}, kWall).ok());
  Result<std::vector<json>> first = follower.poll();
  REQUIRE(first.ok());
  REQUIRE(first->size() == 2);
  CHECK((*first)[1]["ev"] == "b");

  append_raw(path, "{\"ts\":\"t\",\"ev\":\"c\"");  // half a line: not yet
  CHECK(follower.poll()->empty());
  append_raw(path, "}\n");
  Result<std::vector<json>> second = follower.poll();
  REQUIRE(second.ok());
  REQUIRE(second->size() == 1);
  CHECK((*second)[0]["ev"] == "c");
}

TEST_CASE("read_tail_lines returns the last complete lines and where they end") {
  TempDir dir;
  std::string path = dir.path + "/rank.log";
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";  // > one 64 KiB block
  REQUIRE(write_file_atomic(path, text + "partial").ok());

  Result<FileTail> tail = read_tail_lines(path, 3);
  REQUIRE(tail.ok());
  REQUIRE(tail->lines.size() == 3);
  CHECK(tail->lines[0] == "line 19997");
  CHECK(tail->lines[2] == "line 19999");
  CHECK(tail->partial == "partial");
  CHECK(tail->complete_end == static_cast<int64_t>(text.size()));

  Result<FileTail> all = read_tail_lines(path, 100000);
  REQUIRE(all.ok());
  CHECK(all->lines.size() == 20000);
  CHECK(all->lines.front() == "line 0");
  CHECK(read_tail_lines(dir.path + "/missing.log", 5)->lines.empty());

  LineFollower follower(path, tail->complete_end);
  CHECK(follower.poll()->empty());
  CHECK(follower.take_partial() == "partial");
}
