// The agent's worker-socket directory (launcher/agent/runtime_directory.h): the base comes from
// the agent's own uid, every component is checked, and a directory another user could have
// planted a socket in is refused with its owner and mode named. Real directories, real owners.

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "launcher/agent/runtime_directory.h"
#include "tests/skip.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::choose_runtime_base;
using dtrain::agent::make_runtime_directory;
using dtrain::agent::run_short_id;
using dtrain::agent::RuntimeDirectory;
using dtrain::testing::TempDir;

namespace {

constexpr uid_t kNobody = 65534;

mode_t mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

std::string refusal(const RuntimeDirectory& directory) {
  dtrain::Status made = make_runtime_directory(directory);
  REQUIRE_FALSE(made.ok());
  return made.error().message;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void require_root(const char* why) {
  if (::geteuid() != 0) dtrain::testing::skip_test(std::string("needs root to ") + why);
}

}  // namespace

TEST_CASE("the run id is the last component of the supervisor's runtime_dir, and only that") {
  CHECK(*run_short_id("/tmp/dtrain-1000/3fa2c1d0") == "3fa2c1d0");
  CHECK(*run_short_id("/tmp/dtrain-0/t123-4_x.y") == "t123-4_x.y");
  // The supervisor's uid in the path is ignored: only the name of the run travels.
  CHECK(*run_short_id("/home/someone/else/abc") == "abc");
  for (std::string bad : {std::string(), std::string("/tmp/dtrain-0/"), std::string("/tmp/dtrain-0/.."),
                          std::string("/tmp/."), std::string("/tmp/a b"), std::string("/tmp/a\\b"),
                          std::string("/tmp/a\0b", 8)}) {
    dtrain::Result<std::string> id = run_short_id(bad);
    CHECK_FALSE(id.ok());
    if (!id.ok()) CHECK(contains(id.error().message, "config.runtime_dir"));
  }
  dtrain::Result<std::string> nul = run_short_id(std::string("/tmp/a\0b", 8));
  REQUIRE_FALSE(nul.ok());
  CHECK(contains(nul.error().message, "'a\\x00b' may hold only"));  // shown, not cut at the NUL
  dtrain::Result<std::string> long_id = run_short_id("/tmp/" + std::string(65, 'd'));
  REQUIRE_FALSE(long_id.ok());
  CHECK(contains(long_id.error().message, "must fit in 107 bytes"));
  CHECK(run_short_id("/tmp/" + std::string(64, 'd')).ok());
}

TEST_CASE("the base is $XDG_RUNTIME_DIR/dtrain when that is private to us, else /tmp/dtrain-<euid>") {
  std::string fallback = "/tmp/dtrain-" + std::to_string(::geteuid());
  TempDir temp;
  std::string xdg = temp.path + "/xdg";
  REQUIRE(::mkdir(xdg.c_str(), 0700) == 0);
  REQUIRE(::chmod(xdg.c_str(), 0700) == 0);
  CHECK(choose_runtime_base("", xdg) == xdg + "/dtrain");
  CHECK(choose_runtime_base("", "") == fallback);
  CHECK(choose_runtime_base("", "relative/xdg") == fallback);
  CHECK(choose_runtime_base("", temp.path + "/missing") == fallback);
  CHECK(choose_runtime_base("/somewhere/else", xdg) == "/somewhere/else");  // the test override wins

  std::string link = temp.path + "/xdg-link";
  REQUIRE(::symlink(xdg.c_str(), link.c_str()) == 0);
  CHECK(choose_runtime_base("", link) == fallback);

  REQUIRE(::chmod(xdg.c_str(), 0755) == 0);
  CHECK(choose_runtime_base("", xdg) == fallback);
}

TEST_CASE("a fresh base and run directory are created 0700 whatever the umask") {
  TempDir temp;
  RuntimeDirectory directory{temp.path + "/base", "run1"};
  mode_t old_umask = ::umask(0777);  // mkdir alone would make them 0000
  dtrain::Status made = make_runtime_directory(directory);
  ::umask(old_umask);
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));
  CHECK(mode_of(directory.base) == 0700);
  CHECK(mode_of(directory.path()) == 0700);
  CHECK(make_runtime_directory(directory).ok());  // already there and ours: fine
}

TEST_CASE("a base with group or other access is refused, not repaired") {
  TempDir temp;
  RuntimeDirectory directory{temp.path + "/base", "run1"};
  REQUIRE(::mkdir(directory.base.c_str(), 0700) == 0);
  REQUIRE(::chmod(directory.base.c_str(), 0755) == 0);
  std::string message = refusal(directory);
  CHECK(contains(message, "runtime directory '" + directory.base + "' has mode 0755, not 0700"));
  CHECK(contains(message, "chmod 0700"));
  CHECK(mode_of(directory.base) == 0755);
  CHECK(::access(directory.path().c_str(), F_OK) != 0);  // nothing created inside it
}

TEST_CASE("a symlinked base or run directory is refused") {
  TempDir temp;
  std::string real = temp.path + "/real";
  REQUIRE(::mkdir(real.c_str(), 0700) == 0);
  SUBCASE("base") {
    RuntimeDirectory directory{temp.path + "/base", "run1"};
    REQUIRE(::symlink(real.c_str(), directory.base.c_str()) == 0);
    CHECK(contains(refusal(directory), "runtime directory '" + directory.base + "' is a symbolic link"));
    CHECK(::access((real + "/run1").c_str(), F_OK) != 0);
  }
  SUBCASE("run directory") {
    RuntimeDirectory directory{temp.path + "/base", "run1"};
    REQUIRE(::mkdir(directory.base.c_str(), 0700) == 0);
    REQUIRE(::symlink(real.c_str(), directory.path().c_str()) == 0);
    CHECK(contains(refusal(directory), "runtime directory '" + directory.path() + "' is a symbolic link"));
  }
}

TEST_CASE("a parent that others may write to must be sticky, like /tmp") {
  TempDir temp;
  std::string shared = temp.path + "/shared";
  REQUIRE(::mkdir(shared.c_str(), 0700) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  RuntimeDirectory directory{shared + "/dtrain-x", "run1"};
  CHECK(contains(refusal(directory), "runtime directory parent '" + shared + "' has mode 0777"));
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);
  CHECK(make_runtime_directory(directory).ok());
}

TEST_CASE("a base pre-created by another uid is refused, naming both uids") {
  require_root("create a directory owned by uid 65534");
  TempDir temp;
  RuntimeDirectory directory{temp.path + "/dtrain-" + std::to_string(::geteuid()), "run1"};
  REQUIRE(::mkdir(directory.base.c_str(), 0700) == 0);
  REQUIRE(::chown(directory.base.c_str(), kNobody, kNobody) == 0);
  std::string message = refusal(directory);
  CHECK(contains(message, "runtime directory '" + directory.base + "' belongs to uid 65534, not to this agent's uid " +
                              std::to_string(::geteuid())));
  CHECK(contains(message, "fix: remove it"));
  CHECK(::access(directory.path().c_str(), F_OK) != 0);
}

TEST_CASE("a run directory pre-created by another uid is refused") {
  require_root("create a directory owned by uid 65534");
  TempDir temp;
  RuntimeDirectory directory{temp.path + "/base", "run1"};
  REQUIRE(::mkdir(directory.base.c_str(), 0700) == 0);
  REQUIRE(::mkdir(directory.path().c_str(), 0700) == 0);
  REQUIRE(::chown(directory.path().c_str(), kNobody, kNobody) == 0);
  CHECK(contains(refusal(directory), "runtime directory '" + directory.path() + "' belongs to uid 65534"));
}

TEST_CASE("a parent owned by another user is refused") {
  require_root("create a directory owned by uid 65534");
  TempDir temp;
  std::string theirs = temp.path + "/theirs";
  REQUIRE(::mkdir(theirs.c_str(), 0755) == 0);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  RuntimeDirectory directory{theirs + "/base", "run1"};
  CHECK(contains(refusal(directory), "runtime directory parent '" + theirs + "' belongs to uid 65534"));
}
