#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "tests/unit/file_size_limit.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using dtrain::testing::FileSizeLimit;
using dtrain::testing::TempDir;

namespace {

std::vector<std::string> names_in(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

}  // namespace

TEST_CASE("write_file_atomic replaces the file whole") {
  TempDir dir;
  std::string path = dir.path + "/state.json";
  REQUIRE(write_file_atomic(path, "old\n").ok());
  REQUIRE(write_file_atomic(path, "new\n").ok());
  CHECK(*read_file(path) == "new\n");
  struct stat info{};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  CHECK(names_in(dir.path) == std::vector<std::string>{"state.json"});
}

TEST_CASE("write_file_atomic that fails mid-write keeps the old file and leaves no temp file") {
  TempDir dir;
  std::string path = dir.path + "/state.json";
  REQUIRE(write_file_atomic(path, "old contents\n").ok());
  {
    FileSizeLimit limit(100);  // the new contents stop after 100 bytes, as on a full disk
    Status failed = write_file_atomic(path, std::string(5000, 'x'));
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error().kind == ErrorKind::infra);
    CHECK(failed.error().message.find(path + ": cannot write (File too large); the old file is unchanged") == 0);
  }
  CHECK(*read_file(path) == "old contents\n");
  CHECK(names_in(dir.path) == std::vector<std::string>{"state.json"});
}

TEST_CASE("write_file_atomic whose rename fails removes its temp file") {
  TempDir dir;
  // A directory in the way: the temp file is written, the rename over a directory fails.
  std::string path = dir.path + "/plan-0.json";
  REQUIRE(std::filesystem::create_directory(path));
  REQUIRE(std::filesystem::create_directory(path + "/inside"));
  Status failed = write_file_atomic(path, "{}\n");
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().message.find(path + ": rename: ") == 0);
  CHECK(names_in(dir.path) == std::vector<std::string>{"plan-0.json"});
}
