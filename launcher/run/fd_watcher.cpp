#include "launcher/run/fd_watcher.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>

namespace dtrain::run {

namespace {

uint32_t to_epoll(short events) {
  return (events & POLLIN ? EPOLLIN : 0u) | (events & POLLOUT ? EPOLLOUT : 0u);
}

short from_epoll(uint32_t events) {
  return static_cast<short>((events & EPOLLIN ? POLLIN : 0) | (events & EPOLLOUT ? POLLOUT : 0) |
                            (events & EPOLLHUP ? POLLHUP : 0) | (events & EPOLLERR ? POLLERR : 0));
}

}  // namespace

FdWatcher::FdWatcher() : epoll_(::epoll_create1(EPOLL_CLOEXEC)) {}

void FdWatcher::begin() {
  for (auto& [fd, entry] : entries_) entry.declared = false;
}

void FdWatcher::watch(int fd, short events, void* owner) {
  epoll_event event{};
  event.events = to_epoll(events);
  event.data.fd = fd;
  auto [it, added] = entries_.try_emplace(fd);
  Entry& entry = it->second;
  entry.declared = true;
  // Another owner for a known number: the old fd was closed (the kernel dropped its
  // registration) and the number reused, e.g. a lost relay's socket for the direct connection
  // that re-attaches one of its hosts. Registered again, or it would never be reported ready.
  bool same_owner = entry.owner == owner;
  entry.owner = owner;
  if (!added && same_owner && entry.events == events) return;
  entry.events = events;
  if (added || ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event) != 0) {
    // New, or the number was closed and reused since (the kernel dropped the old registration).
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0 && errno == EEXIST) {
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event);
    }
  }
}

int FdWatcher::end_round() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.declared) {
      ++it;
      continue;
    }
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);  // may be closed already: fine
    it = entries_.erase(it);
  }
  return epoll_.get();
}

const std::vector<FdWatcher::Ready>& FdWatcher::collect() {
  ready_.clear();
  // One call with room for every watched fd: epoll is level-triggered, so a second call would
  // return the same fds again until they are read.
  events_.resize(std::max<size_t>(1, entries_.size()));
  int count = ::epoll_wait(epoll_.get(), events_.data(), static_cast<int>(events_.size()), 0);
  for (int i = 0; i < count; ++i) {
    auto entry = entries_.find(events_[static_cast<size_t>(i)].data.fd);
    if (entry != entries_.end()) ready_.push_back({entry->second.owner, from_epoll(events_[static_cast<size_t>(i)].events)});
  }
  return ready_;
}

}  // namespace dtrain::run
