#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/runlog/rank_logs.h"

using namespace dtrain;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/dtrain-ranklogs-test-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

const int64_t kWall = 1'795'995'662'120;  // 2026-11-29T23:41:02.120Z

}  // namespace

TEST_CASE("rank logs mark each generation and keep ranks apart") {
  TempDir dir;
  RankLogs logs(dir.path);
  REQUIRE(logs.append(0, 0, "hello\n", kWall).ok());
  REQUIRE(logs.append(1, 0, "from one\n", kWall).ok());
  REQUIRE(logs.append(0, 0, "step 1\n", kWall).ok());
  REQUIRE(logs.append(0, 1, "again\n", kWall + 1000).ok());

  CHECK(*read_file(dir.path + "/0.log") ==
        "=== dtrain generation 0 (2026-11-29T23:41:02.120Z) ===\n"
        "hello\n"
        "step 1\n"
        "=== dtrain generation 1 (2026-11-29T23:41:03.120Z) ===\n"
        "again\n");
  CHECK(*read_file(dir.path + "/1.log") ==
        "=== dtrain generation 0 (2026-11-29T23:41:02.120Z) ===\nfrom one\n");
}

TEST_CASE("a marker after an unterminated chunk still starts on its own line") {
  TempDir dir;
  RankLogs logs(dir.path);
  REQUIRE(logs.append(3, 0, "progress 50%", kWall).ok());
  REQUIRE(logs.append(3, 0, " 100%", kWall).ok());
  REQUIRE(logs.append(3, 2, "resumed\n", kWall).ok());
  CHECK(*read_file(dir.path + "/3.log") ==
        "=== dtrain generation 0 (2026-11-29T23:41:02.120Z) ===\n"
        "progress 50% 100%\n"
        "=== dtrain generation 2 (2026-11-29T23:41:02.120Z) ===\n"
        "resumed\n");
}

TEST_CASE("a new writer (restarted supervisor) appends instead of truncating") {
  TempDir dir;
  REQUIRE(RankLogs(dir.path).append(0, 0, "before\n", kWall).ok());
  REQUIRE(RankLogs(dir.path).append(0, 1, "after\n", kWall).ok());
  std::string text = *read_file(dir.path + "/0.log");
  CHECK(text.find("before\n") != std::string::npos);
  CHECK(text.find("generation 1") > text.find("before"));
}

TEST_CASE("generation markers parse back") {
  int generation = -1;
  CHECK(parse_generation_marker(generation_marker(7, kWall), &generation));
  CHECK(generation == 7);
  CHECK_FALSE(parse_generation_marker("=== dtrain generation x ==="));
  CHECK_FALSE(parse_generation_marker("hello"));
}

TEST_CASE("a missing ranks directory is an error naming the file") {
  RankLogs logs("/nonexistent-dtrain-dir");
  Status status = logs.append(0, 0, "x\n", kWall);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().message.find("/nonexistent-dtrain-dir/0.log") != std::string::npos);
}
