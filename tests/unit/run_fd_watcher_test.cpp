// The driver's FdWatcher (epoll behind poll's interface): what is ready is reported with its
// owner, and a number closed and reused by another owner is watched again (the kernel drops a
// closed fd's registration; a lost relay's socket number is reused by the direct connection that
// re-attaches one of its hosts).

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/run/fd_watcher.h"

using dtrain::Pipe;
using dtrain::run::FdWatcher;

namespace {

Pipe pipe_or_fail() {
  auto made = dtrain::make_pipe();
  REQUIRE(made);
  return std::move(*made);
}

}  // namespace

TEST_CASE("a readable fd is reported with its owner, an idle one is not") {
  FdWatcher watcher;
  Pipe busy = pipe_or_fail();
  Pipe idle = pipe_or_fail();
  int busy_owner = 1, idle_owner = 2;
  REQUIRE(::write(busy.write_end.get(), "x", 1) == 1);
  watcher.begin();
  watcher.watch(busy.read_end.get(), POLLIN, &busy_owner);
  watcher.watch(idle.read_end.get(), POLLIN, &idle_owner);
  watcher.end_round();
  const auto& ready = watcher.collect();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].owner == &busy_owner);
  CHECK((ready[0].revents & POLLIN) != 0);
}

TEST_CASE("a number closed and reused by another owner with the same events is watched again") {
  FdWatcher watcher;
  Pipe first = pipe_or_fail();
  int relay = 1, relayed_host = 2;
  int number = first.read_end.get();
  watcher.begin();
  watcher.watch(number, POLLIN, &relay);
  watcher.end_round();
  CHECK(watcher.collect().empty());

  // The relay's connection closes; a new one gets the same number.
  Pipe second = pipe_or_fail();
  first.read_end.reset();
  REQUIRE(::dup3(second.read_end.get(), number, O_CLOEXEC) == number);
  REQUIRE(::write(second.write_end.get(), "x", 1) == 1);
  watcher.begin();
  watcher.watch(number, POLLIN, &relayed_host);
  watcher.end_round();
  const auto& ready = watcher.collect();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].owner == &relayed_host);
  ::close(number);
}
