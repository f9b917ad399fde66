#pragma once
// FdWatcher: poll(2)'s interface over epoll(7), for the driver's loop (its agent links; the few
// other fds are polled with the epoll fd, so a closed and reused number there is never missed). The loop re-declares
// every fd it wants on every iteration (connections' fds change: a pidfd appears, POLLOUT comes
// and goes), as it would build a pollfd array, but only changes reach the kernel, and a wait
// costs O(ready fds), not O(all fds): at 2,048 hosts, polling every socket 50 times a second was
// a seventh of the supervisor's CPU.

#include <poll.h>
#include <sys/epoll.h>

#include <unordered_map>
#include <vector>

#include "launcher/base/fd.h"

namespace dtrain::run {

class FdWatcher {
 public:
  FdWatcher();

  /// Starts a new declaration round: fds not watched again before wait() are dropped.
  void begin();
  /// Watch `fd` for `events` (POLLIN/POLLOUT) on behalf of `owner` (returned with its events).
  /// A number declared by another owner than before is registered again (closed and reused).
  void watch(int fd, short events, void* owner);

  /// Ends the round (drops what was not declared again). The epoll fd is then readable when any
  /// watched fd is ready: poll it together with fds kept out of the watcher.
  int end_round();

  struct Ready {
    void* owner;
    short revents;  ///< POLLIN, POLLOUT, POLLHUP, POLLERR as poll(2) reports them
  };
  /// The watched fds ready now (does not wait), in no particular order.
  const std::vector<Ready>& collect();

 private:
  struct Entry {
    short events = 0;
    void* owner = nullptr;
    bool declared = false;
  };
  UniqueFd epoll_;
  std::unordered_map<int, Entry> entries_;
  std::vector<Ready> ready_;
  std::vector<struct epoll_event> events_;
};

}  // namespace dtrain::run
