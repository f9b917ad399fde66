// A run's socket directory (launcher/base/runtime_directory.h): every component is checked, a
// directory another user could have planted a socket in is refused with its owner and mode
// named, and a refused base is replaced by a fresh private one for the run (mkdtemp) instead of
// stopping it. Real directories, real owners.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "launcher/base/runtime_directory.h"
#include "tests/skip.h"
#include "tests/unit/temp_dir.h"

using dtrain::default_runtime_base;
using dtrain::make_runtime_directory;
using dtrain::open_runtime_directory;
using dtrain::remove_runtime_directory;
using dtrain::run_short_id;
using dtrain::RuntimeDirectory;
using dtrain::RuntimeDirectoryChoice;
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

TEST_CASE("the default base is $DTRAIN_RUNTIME_BASE when set, else /tmp/dtrain-<euid>") {
  ::unsetenv("DTRAIN_RUNTIME_BASE");
  CHECK(default_runtime_base() == "/tmp/dtrain-" + std::to_string(::geteuid()));
  ::setenv("DTRAIN_RUNTIME_BASE", "/somewhere/else", 1);
  CHECK(default_runtime_base() == "/somewhere/else");
  ::setenv("DTRAIN_RUNTIME_BASE", "", 1);
  CHECK(default_runtime_base() == "/tmp/dtrain-" + std::to_string(::geteuid()));
  ::unsetenv("DTRAIN_RUNTIME_BASE");
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
  CHECK(contains(message, "runtime directory '" + directory.base + "' belongs to uid 65534, not to this process's uid " +
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

namespace {

// open_runtime_directory of `requested`, which must succeed.
RuntimeDirectoryChoice opened(const std::string& requested) {
  dtrain::Result<RuntimeDirectoryChoice> choice = open_runtime_directory(requested);
  REQUIRE_MESSAGE(choice.ok(), (choice.ok() ? "" : choice.error().message));
  return *choice;
}

}  // namespace

TEST_CASE("open_runtime_directory uses the requested path, whole, when it is private to us") {
  TempDir temp;
  RuntimeDirectoryChoice choice = opened(temp.path + "/dtrain-x/run1");
  CHECK_FALSE(choice.fell_back());
  CHECK(choice.directory.path() == temp.path + "/dtrain-x/run1");
  CHECK(mode_of(choice.directory.path()) == 0700);
  remove_runtime_directory(choice);
  CHECK(::access(choice.directory.path().c_str(), F_OK) != 0);
  CHECK(::access(choice.directory.base.c_str(), F_OK) == 0);  // a shared base stays
}

TEST_CASE("a base of another uid is not used: a fresh private one next to it, and why") {
  require_root("create a directory owned by uid 65534");
  TempDir temp;
  std::string blocked = temp.path + "/dtrain-" + std::to_string(::geteuid());
  REQUIRE(::mkdir(blocked.c_str(), 0700) == 0);
  REQUIRE(::chown(blocked.c_str(), kNobody, kNobody) == 0);
  RuntimeDirectoryChoice choice = opened(blocked + "/run1");
  REQUIRE(choice.fell_back());
  CHECK(contains(choice.refused, "runtime directory '" + blocked + "' belongs to uid 65534"));
  CHECK(choice.directory.base.rfind(blocked + "-", 0) == 0);  // <base>-XXXXXX
  CHECK(choice.directory.base.size() == blocked.size() + 7);
  CHECK(choice.directory.path() == choice.directory.base + "/run1");
  CHECK(mode_of(choice.directory.base) == 0700);
  CHECK(mode_of(choice.directory.path()) == 0700);
  CHECK(std::filesystem::is_empty(blocked));  // nothing of ours went into theirs

  // A second run (or agent) gets a base of its own, never the first one's.
  RuntimeDirectoryChoice second = opened(blocked + "/run1");
  CHECK(second.directory.base != choice.directory.base);
  remove_runtime_directory(second);
  remove_runtime_directory(choice);
  CHECK(::access(choice.directory.base.c_str(), F_OK) != 0);  // the fallback was the run's own
}

TEST_CASE("a symlinked, open or non-directory base falls back too, a bad run id does not") {
  TempDir temp;
  std::string base = temp.path + "/base";
  SUBCASE("symlink") {
    std::string real = temp.path + "/real";
    REQUIRE(::mkdir(real.c_str(), 0700) == 0);
    REQUIRE(::symlink(real.c_str(), base.c_str()) == 0);
    RuntimeDirectoryChoice choice = opened(base + "/run1");
    CHECK(contains(choice.refused, "is a symbolic link"));
    CHECK(std::filesystem::is_empty(real));
    remove_runtime_directory(choice);
  }
  SUBCASE("mode 0777") {
    REQUIRE(::mkdir(base.c_str(), 0700) == 0);
    REQUIRE(::chmod(base.c_str(), 0777) == 0);
    RuntimeDirectoryChoice choice = opened(base + "/run1");
    CHECK(contains(choice.refused, "has mode 0777, not 0700"));
    remove_runtime_directory(choice);
  }
  SUBCASE("a file") {
    REQUIRE(::close(::open(base.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) == 0);
    RuntimeDirectoryChoice choice = opened(base + "/run1");
    CHECK(contains(choice.refused, "is not a directory"));
    remove_runtime_directory(choice);
  }
  SUBCASE("a bad run id") {
    dtrain::Result<RuntimeDirectoryChoice> refused = open_runtime_directory(base + "/..");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().kind == dtrain::ErrorKind::user);
    CHECK(::access(base.c_str(), F_OK) != 0);
  }
}

TEST_CASE("a base whose parent is missing or not ours falls back to /tmp/dtrain-<euid>-XXXXXX") {
  TempDir temp;
  RuntimeDirectoryChoice choice = opened(temp.path + "/missing/base/run1");
  REQUIRE(choice.fell_back());
  std::string prefix = "/tmp/dtrain-" + std::to_string(::geteuid()) + "-";
  CHECK(choice.directory.base.rfind(prefix, 0) == 0);
  CHECK(choice.directory.base.size() == prefix.size() + 6);
  CHECK(mode_of(choice.directory.path()) == 0700);
  remove_runtime_directory(choice);
  CHECK(::access(choice.directory.base.c_str(), F_OK) != 0);
}
