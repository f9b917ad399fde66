#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/line_follower.h"
#include "tests/unit/file_size_limit.h"

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

// The typed reader's events as JSON (as `dtrain status --json` prints them), so that the cases
// below can name any field, and its skipped lines as their messages.
using WarningSink = std::function<void(const std::string&)>;

EventErrorSink messages_to(const WarningSink& on_warning) {
  if (!on_warning) return nullptr;
  return [on_warning](const EventLineError& error) { on_warning(error.message()); };
}

Result<std::vector<json>> as_json(Result<std::vector<LoggedEvent>> events) {
  if (!events) return events.error();
  std::vector<json> out;
  for (const LoggedEvent& event : *events) out.push_back(to_json(event));
  return out;
}

Result<std::vector<json>> read_as_json(const std::string& path, const WarningSink& on_warning = nullptr) {
  return as_json(read_logged_events(path, messages_to(on_warning)));
}

Result<std::vector<json>> read_last_as_json(const std::string& path, size_t count, const WarningSink& on_warning = nullptr) {
  return as_json(read_last_logged_events(path, count, messages_to(on_warning)));
}

Result<std::vector<json>> poll_as_json(EventFollower& follower, const WarningSink& on_warning = nullptr) {
  return as_json(follower.poll_events(messages_to(on_warning)));
}

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

  Result<std::vector<json>> events = read_as_json(path);
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

TEST_CASE("a truncated final line is skipped and a corrupt middle line is skipped with a warning naming it") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  {
    Result<EventLog> log = EventLog::create(path, "r", kWall);
    REQUIRE(log.ok());
    REQUIRE(log->append({{"ev", "a"}}, kWall).ok());
  }
  append_raw(path, "{\"ts\":\"2026-11-29T23:41:02.1");  // writer killed mid-line
  std::vector<std::string> warnings;
  auto collect = [&warnings](const std::string& warning) { warnings.push_back(warning); };
  Result<std::vector<json>> events = read_as_json(path, collect);
  REQUIRE(events.ok());
  CHECK(events->size() == 1);
  CHECK(warnings.empty());  // a final unterminated line is a writer mid-line, not corruption

  append_raw(path, "\n{\"ts\":\"x\",\"ev\":\"b\"}\n");  // the broken line is now line 3 of 4
  Result<std::vector<json>> after = read_as_json(path, collect);
  REQUIRE(after.ok());
  REQUIRE(after->size() == 2);
  CHECK((*after)[0]["ev"] == "a");
  CHECK((*after)[1]["ev"] == "b");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find(path + ":3: skipped a corrupt line (not valid JSON)") == 0);
  CHECK(warnings[0].find("2026-11-29T23:41:02.1") != std::string::npos);
  // Without a sink the line is skipped all the same.
  CHECK(read_as_json(path)->size() == 2);
}

TEST_CASE("parse_event_line accepts what the writer writes and names the field it refuses") {
  Result<EventRecord> good = parse_event_line(format_event_line(
      {{"ev", "worker.exit"}, {"gen", 1}, {"rank", 2}, {"host", "h"}, {"pid", 77}, {"code", 3},
       {"log", "/r/ranks/2.log"}, {"tail", json::array({"x"})}},
      kWall));
  REQUIRE(good.ok());
  CHECK(good->name == "worker.exit");
  CHECK(good->ts == "2026-11-29T23:41:02.120Z");
  CHECK(good->event["rank"] == 2);

  struct Case {
    const char* line;
    const char* problem;
  };
  const Case cases[] = {
      {"", "not valid JSON"},
      {"{\"ts\":\"t\",\"ev\":\"a\"", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {"\"text\"", "not a JSON object"},
      {"{\"ev\":\"a\"}", "no \"ts\""},
      {"{\"ts\":\"t\"}", "no \"ev\""},
      {"{\"ts\":5,\"ev\":\"a\"}", "\"ts\" is an integer, expected a string"},
      {"{\"ts\":\"t\",\"ev\":null}", "\"ev\" is null, expected a string"},
      {"{\"ts\":\"t\",\"ev\":[\"a\"]}", "\"ev\" is an array, expected a string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    Result<EventRecord> record = parse_event_line(c.line);
    REQUIRE_FALSE(record.ok());
    CHECK(record.error().message == c.problem);
  }
}

TEST_CASE("every field readers look up, wrongly typed, gets its line skipped with a warning — other lines stay") {
  // The fields that status, logs, resume and drill read by name, each with a value of another
  // type. nlohmann's value() would throw on any of them ("internal bug" in dtrain status).
  struct Case {
    const char* field;
    json wrong;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"gen", "1", "\"gen\" is a string, expected an integer"},
      {"gen", nullptr, "\"gen\" is null, expected an integer"},
      {"gen", 1.5, "\"gen\" is a float, expected an integer"},
      {"rank", json::array({2}), "\"rank\" is an array, expected an integer"},
      {"local_rank", true, "\"local_rank\" is a boolean, expected an integer"},
      {"pid", json::object(), "\"pid\" is an object, expected an integer"},
      {"step", "12", "\"step\" is a string, expected an integer"},
      {"step", nullptr, "\"step\" is null, expected an integer"},
      {"code", "1", "\"code\" is a string, expected an integer"},
      {"exit_code", 0.5, "\"exit_code\" is a float, expected an integer"},
      {"world_size", "4", "\"world_size\" is a string, expected an integer"},
      {"restarts", false, "\"restarts\" is a boolean, expected an integer"},
      {"steps_lost", "3", "\"steps_lost\" is a string, expected an integer"},
      {"host", 7, "\"host\" is an integer, expected a string"},
      {"host", nullptr, "\"host\" is null, expected a string"},
      {"state", json::array(), "\"state\" is an array, expected a string"},
      {"kind", 1, "\"kind\" is an integer, expected a string"},
      {"detail", json::object(), "\"detail\" is an object, expected a string"},
      {"signal", 9, "\"signal\" is an integer, expected a string"},
      {"log", false, "\"log\" is a boolean, expected a string"},
      {"reason", 1, "\"reason\" is an integer, expected a string"},
      {"fault", 1, "\"fault\" is an integer, expected a string"},
      {"verdict", true, "\"verdict\" is a boolean, expected a string"},
      {"mode", 2, "\"mode\" is an integer, expected a string"},
      {"message", nullptr, "\"message\" is null, expected a string"},
      {"seconds", "1.5", "\"seconds\" is a string, expected a number"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.field);
    CAPTURE(c.wrong.dump());
    TempDir dir;
    std::string path = dir.path + "/events.jsonl";
    {
      Result<EventLog> log = EventLog::create(path, "r", kWall);
      REQUIRE(log.ok());
      REQUIRE(log->append({{"ev", "plan.generation"}, {"gen", 0}, {"world_size", 2}}, kWall).ok());
    }
    json bad = {{"ts", "2026-11-29T23:41:02.120Z"}, {"ev", "checkpoint.committed"}, {"gen", 0}, {"step", 10}};
    bad[c.field] = c.wrong;
    append_raw(path, bad.dump() + "\n");
    append_raw(path, format_event_line({{"ev", "checkpoint.committed"}, {"gen", 0}, {"step", 20}}, kWall) + "\n");

    std::vector<std::string> warnings;
    Result<std::vector<json>> events = read_as_json(path, [&](const std::string& w) { warnings.push_back(w); });
    REQUIRE(events.ok());
    REQUIRE(events->size() == 2);
    CHECK((*events)[0]["ev"] == "plan.generation");
    CHECK((*events)[1]["step"] == 20);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(path + ":3: skipped a corrupt line (" + c.problem + ")") == 0);
    // What readers do with the events that are left must not throw (resume's reads, for one).
    for (const json& event : *events) {
      CHECK_NOTHROW((void)event.value("gen", -1));
      CHECK_NOTHROW((void)event.value("step", int64_t{-1}));
    }

    EventFollower follower(path);
    Result<std::vector<json>> followed = poll_as_json(follower, [&](const std::string& w) { warnings.push_back(w); });
    REQUIRE(followed.ok());
    CHECK(followed->size() == 2);
    CHECK(follower.skipped_lines() == 1);
  }
}

TEST_CASE("an append that fails part-way (file too large, as on a full disk) leaves whole lines only") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  Result<EventLog> log = EventLog::create(path, "r", kWall);
  REQUIRE(log.ok());
  REQUIRE(log->append({{"ev", "a"}}, kWall).ok());
  const std::string before = *read_file(path);
  EventFollower follower(path);
  REQUIRE(poll_as_json(follower)->size() == 1);
  {
    dtrain::testing::FileSizeLimit limit(before.size() + 20);  // room for 20 bytes of the line
    Status failed = log->append({{"ev", "b"}, {"detail", std::string(200, 'x')}}, kWall);
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error().kind == ErrorKind::infra);
    CHECK(failed.error().message.find(path + ": cannot append event 'b': File too large") == 0);
    CHECK(failed.error().message.find("cut back to its last whole line") != std::string::npos);
    CHECK(*read_file(path) == before);  // not a byte of the failed line is left
  }
  // Room again: the next event starts on a line of its own and every reader sees both.
  REQUIRE(log->append({{"ev", "c"}}, kWall).ok());
  std::vector<std::string> warnings;
  Result<std::vector<json>> events = read_as_json(path, [&](const std::string& w) { warnings.push_back(w); });
  REQUIRE(events.ok());
  REQUIRE(events->size() == 2);
  CHECK((*events)[1]["ev"] == "c");
  CHECK(warnings.empty());
  Result<std::vector<json>> followed = poll_as_json(follower);
  REQUIRE(followed.ok());
  REQUIRE(followed->size() == 1);
  CHECK((*followed)[0]["ev"] == "c");
}

TEST_CASE("a follower that saw half of a line which the writer then cut off reads the next line whole") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  Result<EventLog> log = EventLog::create(path, "r", kWall);
  REQUIRE(log.ok());
  EventFollower follower(path);
  REQUIRE(poll_as_json(follower)->empty());
  const int64_t header_size = static_cast<int64_t>(read_file(path)->size());
  append_raw(path, "{\"ts\":\"2026-11-29T23:41:02.120Z\",\"ev\":\"lo");  // a failed append's bytes
  REQUIRE(poll_as_json(follower)->empty());
  REQUIRE(::truncate(path.c_str(), header_size) == 0);  // what EventLog::append does after it
  REQUIRE(log->append({{"ev", "next"}}, kWall).ok());
  Result<std::vector<json>> events = poll_as_json(follower);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 1);
  CHECK((*events)[0]["ev"] == "next");
  CHECK(follower.skipped_lines() == 0);
}

TEST_CASE("an unknown header version or a missing header is a clear error") {
  TempDir dir;
  std::string newer = dir.path + "/newer.jsonl";
  REQUIRE(write_file_atomic(newer, "{\"dtrain_events\":2,\"run_id\":\"r\"}\n{\"ev\":\"a\"}\n").ok());
  Result<std::vector<json>> events = read_as_json(newer);
  REQUIRE_FALSE(events.ok());
  CHECK(events.error().message.find("version 2") != std::string::npos);

  std::string headless = dir.path + "/headless.jsonl";
  REQUIRE(write_file_atomic(headless, "{\"ts\":\"x\",\"ev\":\"a\"}\n").ok());
  Result<std::vector<json>> no_header = read_as_json(headless);
  REQUIRE_FALSE(no_header.ok());
  CHECK(no_header.error().message.find(headless + ":1: not a dtrain event log") != std::string::npos);

  CHECK_FALSE(read_as_json(dir.path + "/missing.jsonl").ok());
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
  Result<std::vector<json>> events = read_as_json(path);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 2);
  CHECK((*events)[1]["ev"] == "b");
}

TEST_CASE("the event follower returns only events appended since its last poll") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  EventFollower follower(path);
  CHECK(poll_as_json(follower)->empty());  // not created yet: nothing, not an error

  Result<EventLog> log = EventLog::create(path, "r", kWall);
  REQUIRE(log.ok());
  CHECK(poll_as_json(follower)->empty());  // header only
  REQUIRE(log->append({{"ev", "a"}}, kWall).ok());
  REQUIRE(log->append({{"ev", "b"}}, kWall).ok());
  Result<std::vector<json>> first = poll_as_json(follower);
  REQUIRE(first.ok());
  REQUIRE(first->size() == 2);
  CHECK((*first)[1]["ev"] == "b");

  append_raw(path, "{\"ts\":\"t\",\"ev\":\"c\"");  // half a line: not yet
  CHECK(poll_as_json(follower)->empty());
  append_raw(path, "}\n");
  Result<std::vector<json>> second = poll_as_json(follower);
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

TEST_CASE("read_last_logged_events: the newest N of a log much larger than its read window, as read_logged_events ends") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  {
    Result<EventLog> log = EventLog::create(path, "big", kWall);
    REQUIRE(log.ok());
    // ~300 KB: several 64 KiB windows, and lines that straddle window starts.
    for (int i = 0; i < 3000; ++i) {
      REQUIRE(log->append({{"ev", "worker.beat"}, {"rank", i}, {"detail", std::string(static_cast<size_t>(i % 97), 'x')}},
                          kWall + i).ok());
    }
  }
  Result<std::vector<json>> all = read_as_json(path);
  REQUIRE(all.ok());
  for (size_t count : {size_t{1}, size_t{10}, size_t{999}, size_t{2999}, size_t{3000}, size_t{5000}}) {
    CAPTURE(count);
    Result<std::vector<json>> last = read_last_as_json(path, count);
    REQUIRE(last.ok());
    size_t expected = std::min(count, all->size());
    REQUIRE(last->size() == expected);
    CHECK(std::equal(last->begin(), last->end(), all->end() - static_cast<std::ptrdiff_t>(expected)));
  }
  // A corrupt line near the end is skipped with a warning, a writer's partial last line silently.
  append_raw(path, "{not json}\n{\"ts\":\"x\",\"ev\":\"after\"}\n{\"ts\":\"2026-1");
  std::vector<std::string> warnings;
  Result<std::vector<json>> last = read_last_as_json(path, 2, [&](const std::string& w) { warnings.push_back(w); });
  REQUIRE(last.ok());
  REQUIRE(last->size() == 2);
  CHECK((*last)[0]["rank"] == 2999);
  CHECK((*last)[1]["ev"] == "after");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("skipped a corrupt line near the end") != std::string::npos);
}

TEST_CASE("read_last_logged_events: a header-only or empty log has no events, a foreign file is an error") {
  TempDir dir;
  std::string path = dir.path + "/events.jsonl";
  REQUIRE(EventLog::create(path, "r", kWall).ok());
  Result<std::vector<json>> none = read_last_as_json(path, 10);
  REQUIRE(none.ok());
  CHECK(none->empty());
  std::string foreign = dir.path + "/other.jsonl";
  {
    std::FILE* file = std::fopen(foreign.c_str(), "w");
    std::fputs("{\"something\":1}\n{\"ts\":\"x\",\"ev\":\"a\"}\n", file);
    std::fclose(file);
  }
  CHECK_FALSE(read_last_as_json(foreign, 10).ok());
  CHECK_FALSE(read_last_as_json(dir.path + "/missing.jsonl", 10).ok());
}
