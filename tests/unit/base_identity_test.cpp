// Who owns a run and who is the audit actor: $SUDO_USER names the person behind a sudo only when
// the real uid is 0. Any user can export SUDO_USER=alice; believing it would charge alice for the
// run and write audit rows in her name.

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "launcher/base/identity.h"
#include "tests/scoped_variable.h"
#include "tests/skip.h"

using dtrain::audit_actor;
using dtrain::login_user;
using dtrain::run_owner;
using dtrain::sudo_user_of;
using dtrain::testing::ScopedVariable;

TEST_CASE("SUDO_USER counts only for real uid 0, and never names the login user itself") {
  CHECK(sudo_user_of(0, "alice", "root") == "alice");
  CHECK(sudo_user_of(1000, "alice", "bob").empty());   // bob exported SUDO_USER=alice
  CHECK(sudo_user_of(65534, "root", "nobody").empty());
  CHECK(sudo_user_of(0, "", "root").empty());
  CHECK(sudo_user_of(0, nullptr, "root").empty());
  CHECK(sudo_user_of(0, "root", "root").empty());
}

TEST_CASE("a process that is not root and sets SUDO_USER owns its runs and is its own audit actor") {
  if (::getuid() != 0) dtrain::testing::skip_test("needs root, to run one process as root and one as nobody");
  ScopedVariable sudo("SUDO_USER", "dtrain-test-alice");
  // As root (a real `sudo dtrain ...`), the person behind the sudo owns the run.
  CHECK(run_owner() == "dtrain-test-alice");
  CHECK(audit_actor() == login_user() + " (sudo from dtrain-test-alice)");

  // The same variable in a process whose real uid is not 0: ignored. The child reports through
  // its exit status: 0 all as expected, 1 owner wrong, 2 actor wrong, 3 could not drop root.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0 || ::getuid() == 0) _exit(3);
    std::string login = login_user();
    if (run_owner() != login) _exit(1);
    if (audit_actor() != login) _exit(2);
    _exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
