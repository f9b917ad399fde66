// A supervisor of many hosts raises its own open-file limit, and says when it cannot. Each case
// runs in a child process: the limit is the process's, and the test runner keeps its own.

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "launcher/base/open_files.h"
#include "tests/skip.h"

namespace {

/// Runs `body` in a child; its return value is the child's exit status.
int in_child(const std::function<int()>& body) {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(body());
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/// CAP_SYS_RESOURCE in the effective set (bit 24 of CapEff): root in a container may lack it.
bool may_raise_hard_limits() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 24) & 1;
  }
  return false;
}

uint64_t soft_limit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

}  // namespace

TEST_CASE("the per-host estimate grows with the hosts") {
  CHECK(dtrain::open_files_needed(0) >= 64);
  CHECK(dtrain::open_files_needed(16384) >= 16384 * 4);
  CHECK(dtrain::open_files_needed(16384) > dtrain::open_files_needed(2048));
}

TEST_CASE("under the hard limit the soft limit is raised to it") {
  int result = in_child([] {
    rlimit low{256, 4096};
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) return 10;
    dtrain::Result<dtrain::OpenFileLimit> raised = dtrain::raise_open_file_limit(1000);
    if (!raised) return 11;
    if (raised->soft != 4096 || soft_limit() != 4096) return 12;
    return raised->raised_hard ? 13 : 0;
  });
  CHECK(result == 0);
}

TEST_CASE("over the hard limit with CAP_SYS_RESOURCE the hard limit is raised to what the hosts need") {
  if (!may_raise_hard_limits()) dtrain::testing::skip_test("raising a hard limit needs CAP_SYS_RESOURCE, which this process lacks");
  int result = in_child([] {
    rlimit low{256, 1024};
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) return 10;
    dtrain::Result<dtrain::OpenFileLimit> raised = dtrain::raise_open_file_limit(8192);
    if (!raised) return 11;
    if (!raised->raised_hard || raised->soft != 8192 || soft_limit() != 8192) return 12;
    return 0;
  });
  CHECK(result == 0);
}

TEST_CASE("a need no limit can meet is an error with both numbers and the fix, the limit raised as far as it goes") {
  int result = in_child([] {
    // Above fs.nr_open (at most 2^30 on Linux): root cannot have it either.
    dtrain::Result<dtrain::OpenFileLimit> raised = dtrain::raise_open_file_limit(uint64_t(1) << 40);
    if (raised) return 10;
    const std::string& message = raised.error().message;
    if (message.find("1099511627776 open files") == std::string::npos) return 11;
    if (message.find("fs.nr_open") == std::string::npos) return 12;
    if (message.find("LimitNOFILE") == std::string::npos) return 13;
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    return limit.rlim_cur == limit.rlim_max ? 0 : 14;
  });
  CHECK(result == 0);
}
