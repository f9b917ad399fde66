// RunLock (launcher/runlog/run_lock.h): flock on <run>/lock, a second taker refused with the
// holder's pid and host, released when the holder's file is closed; what the lock file says is
// shown only as plain text. A second open file description in this process stands in for a
// second dtrain: flock locks belong to open file descriptions, so the two conflict just as two
// processes do (run_lock_test in tests/integration does it with real processes and SIGKILL).

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "launcher/base/fd.h"
#include "launcher/runlog/run_lock.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;

namespace {

std::string read_text(const std::string& path) {
  Result<std::string> text = read_file(path);
  return text ? *text : "";
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

TEST_CASE("the run lock is held once: a second taker is refused naming the holder, then gets it") {
  testing::TempDir temp;
  RunDirectory run = RunDirectory::at(temp.path, "train-20261202-180000-abcd");
  std::optional<Result<RunLock>> first(RunLock::acquire(run));
  REQUIRE((*first).ok());
  std::string holder = std::to_string(::getpid()) + " " + hostname() + "\n";
  CHECK(read_text(temp.path + "/lock") == holder);
  struct stat info{};
  REQUIRE(::stat((temp.path + "/lock").c_str(), &info) == 0);
  CHECK((info.st_mode & 07777) == 0600);

  Result<RunLock> second = RunLock::acquire(run);
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().kind == ErrorKind::user);
  CHECK(second.error().message == "run train-20261202-180000-abcd is still supervised by pid " +
                                      std::to_string(::getpid()) + " on host " + hostname() + " (it holds " +
                                      temp.path + "/lock); `dtrain stop train-20261202-180000-abcd` ends it, "
                                      "or wait for it to finish");
  CHECK(read_text(temp.path + "/lock") == holder);  // the refused one wrote nothing

  first.reset();  // the holder ends: its file is closed, the lock released
  Result<RunLock> third = RunLock::acquire(run);
  CHECK(third.ok());
}

TEST_CASE("the lock file's text is not trusted: only a plain pid and host name are shown") {
  CHECK(describe_lock_holder("123 gpu01\n") == "pid 123 on host gpu01");
  CHECK(describe_lock_holder("123") == "pid 123");
  CHECK(describe_lock_holder("") == "another dtrain (it has not named itself yet)");
  CHECK(describe_lock_holder("12a host") == "another dtrain (it has not named itself yet)");
  CHECK(describe_lock_holder("123 \x1b]0;owned\x07") == "pid 123");
  CHECK(describe_lock_holder("99999999999 host") == "another dtrain (it has not named itself yet)");
}

TEST_CASE("a lock path that is a symlink is not followed") {
  testing::TempDir temp;
  std::string target = temp.path + "/elsewhere";
  REQUIRE(::symlink(target.c_str(), (temp.path + "/lock").c_str()) == 0);
  Result<RunLock> lock = RunLock::acquire(RunDirectory::at(temp.path, "r"));
  REQUIRE_FALSE(lock.ok());
  CHECK(lock.error().message.find(temp.path + "/lock: cannot open the run's lock file") != std::string::npos);
  CHECK(::access(target.c_str(), F_OK) != 0);
}
