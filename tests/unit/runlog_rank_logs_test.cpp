#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

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

// ---- rotation at logs.max_bytes

namespace {

/// The lines of `path` (without '\n'); a missing file has none.
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  Result<std::string> text = read_file(path);
  if (!text) return lines;
  size_t start = 0;
  for (size_t end; (end = text->find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text->substr(start, end - start));
  }
  return lines;
}

uint64_t size_of(const std::string& path) {
  std::error_code error;
  uint64_t size = std::filesystem::file_size(path, error);
  return error ? 0 : size;
}

}  // namespace

TEST_CASE("a rank log that would pass max_bytes is rotated to .1: one old file, disk bounded, the newest lines kept") {
  TempDir dir;
  const uint64_t max_bytes = 4096;
  RankLogs logs(dir.path, max_bytes);
  const std::string log = dir.path + "/0.log", old = dir.path + "/0.log.1";
  std::vector<std::string> written;
  for (int i = 0; i < 400; ++i) {
    std::string line = "step " + std::to_string(i) + " " + std::string(90, 'x');
    written.push_back(line);
    REQUIRE(logs.append(0, 0, line + "\n", kWall).ok());
    // Each file passes the limit by at most one write; the two together stay near 2x.
    CHECK(size_of(log) <= max_bytes + line.size() + 1 + 200);
    CHECK(size_of(log) + size_of(old) <= 2 * (max_bytes + line.size() + 1 + 200));
  }
  CHECK_FALSE(std::filesystem::exists(dir.path + "/0.log.2"));
  std::vector<std::string> current = lines_of(log), earlier = lines_of(old);
  REQUIRE(!current.empty());
  REQUIRE(!earlier.empty());
  // Both files begin with a rotation marker: .1's says that still older output is gone.
  CHECK(is_rotation_marker(current.front()));
  CHECK(current.front().find("earlier output is in 0.log.1") != std::string::npos);
  CHECK(is_rotation_marker(earlier.front()));
  CHECK_FALSE(is_rotation_marker(written.back()));
  // Without the markers, .1 then the current file are the last lines written, whole and in order.
  std::vector<std::string> kept;
  for (const auto* part : {&earlier, &current}) {
    for (const std::string& line : *part) {
      if (!is_rotation_marker(line) && !parse_generation_marker(line)) kept.push_back(line);
    }
  }
  REQUIRE(kept.size() < written.size());
  CHECK(std::vector<std::string>(written.end() - static_cast<long>(kept.size()), written.end()) == kept);
}

TEST_CASE("rotation: a resumed writer counts what the file holds, a cut line goes on below the marker") {
  TempDir dir;
  REQUIRE(RankLogs(dir.path, 4096).append(1, 0, std::string(3000, 'a') + "\n", kWall).ok());
  RankLogs resumed(dir.path, 4096);
  REQUIRE(resumed.append(1, 1, "progress 50%", kWall).ok());  // 3000 + 12 + marker: fits
  REQUIRE(resumed.append(1, 1, std::string(1500, 'b'), kWall).ok());  // would pass 4096: rotated first
  std::vector<std::string> current = lines_of(dir.path + "/1.log");
  std::string current_text = *read_file(dir.path + "/1.log");
  REQUIRE(!current.empty());
  CHECK(is_rotation_marker(current.front()));
  CHECK(current.front().find("generation 1") != std::string::npos);
  CHECK(current_text.substr(current_text.size() - 1500) == std::string(1500, 'b'));
  std::string earlier = *read_file(dir.path + "/1.log.1");
  CHECK(earlier.substr(earlier.size() - 12) == "progress 50%");
}

TEST_CASE("max_bytes 0 (unlimited) never rotates") {
  TempDir dir;
  RankLogs logs(dir.path);
  for (int i = 0; i < 100; ++i) REQUIRE(logs.append(2, 0, std::string(1000, 'z') + "\n", kWall).ok());
  CHECK(size_of(dir.path + "/2.log") > 100'000);
  CHECK_FALSE(std::filesystem::exists(dir.path + "/2.log.1"));
}
