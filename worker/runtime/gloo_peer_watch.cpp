#include "worker/runtime/gloo_peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>

namespace dtrain::worker {
namespace {

// How often the watch looks at the connections that waits depend on.
constexpr std::chrono::milliseconds kInterval{250};

/// One IPv4 socket of this process: its descriptor and both ends (remote unset when not
/// connected).
struct InetSocket {
  int fd;
  ino_t inode;
  sockaddr_in local;
  std::optional<sockaddr_in> remote;
};

std::vector<InetSocket> inet_sockets() {
  std::vector<InetSocket> sockets;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0 || local.sin_family != AF_INET) continue;
    struct stat status {};
    if (::fstat(fd, &status) != 0) continue;
    InetSocket socket{fd, status.st_ino, local, std::nullopt};
    sockaddr_in remote{};
    length = sizeof(remote);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length) == 0 && remote.sin_family == AF_INET) {
      socket.remote = remote;
    }
    sockets.push_back(socket);
  }
  return sockets;
}

/// An address as Gloo prints it: "[127.0.0.1]:41234".
std::string printed(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
  return "[" + std::string(text) + "]:" + std::to_string(ntohs(address.sin_port));
}

bool same_address(const sockaddr_in& a, const sockaddr_storage& b) {
  if (b.ss_family != AF_INET) return false;
  const auto& other = reinterpret_cast<const sockaddr_in&>(b);
  return a.sin_port == other.sin_port && a.sin_addr.s_addr == other.sin_addr.s_addr;
}

/// The peer's pair address for `rank` out of what the peer published (connectFullMesh: one
/// address per other rank, in rank order), if it reads as one.
std::optional<gloo::transport::tcp::Address> pair_address_for(const std::vector<char>& all, int rank, int peer,
                                                              int size) {
  if (size < 2) return std::nullopt;
  size_t each = all.size() / static_cast<size_t>(size - 1);
  size_t position = static_cast<size_t>(rank > peer ? rank - 1 : rank);
  if (each == 0 || (position + 1) * each > all.size()) return std::nullopt;
  try {
    return gloo::transport::tcp::Address(std::vector<char>(all.begin() + static_cast<long>(position * each),
                                                           all.begin() + static_cast<long>((position + 1) * each)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string local_endpoints() {
  std::string endpoints;
  for (const InetSocket& socket : inet_sockets()) endpoints += printed(socket.local) + " ";
  return endpoints;
}

std::vector<PeerSocket> find_peer_sockets(gloo::rendezvous::Context& context,
                                          const std::function<std::optional<std::vector<char>>(int peer)>& published) {
  std::vector<PeerSocket> found(static_cast<size_t>(context.size));
  std::vector<InetSocket> sockets = inet_sockets();
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    const auto* own = dynamic_cast<const gloo::transport::tcp::Address*>(&context.getPair(peer)->address());
    std::optional<gloo::transport::tcp::Address> theirs;
    if (std::optional<std::vector<char>> all = published(peer)) {
      theirs = pair_address_for(*all, context.rank, peer, context.size);
    }
    PeerSocket& entry = found[static_cast<size_t>(peer)];
    if (theirs && theirs->getSockaddr().ss_family == AF_INET) {
      entry.pair_address = printed(reinterpret_cast<const sockaddr_in&>(theirs->getSockaddr()));
    }
    for (const InetSocket& socket : sockets) {
      if (!socket.remote) continue;
      bool accepted = own != nullptr && same_address(socket.local, own->getSockaddr());
      bool connected = theirs && same_address(*socket.remote, theirs->getSockaddr());
      if (accepted || connected) {
        entry.fd = socket.fd;
        entry.inode = socket.inode;
        entry.address = printed(*socket.remote);
        break;
      }
    }
  }
  return found;
}

PeerWatch::PeerWatch(std::vector<PeerSocket> sockets) : sockets_(std::move(sockets)) {
  if (sockets_.size() > 1) thread_ = std::thread([this] { run(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

PeerWatch::Waiting::Waiting(PeerWatch& watch, gloo::transport::UnboundBuffer& buffer, int peer, bool receiving)
    : watch_(watch) {
  std::lock_guard lock(watch_.mutex_);
  entry_ = watch_.waits_.insert(watch_.waits_.end(), WaitEntry{&buffer, peer, receiving});
  watch_.changed_.notify_all();
}

PeerWatch::Waiting::~Waiting() {
  std::lock_guard lock(watch_.mutex_);
  watch_.waits_.erase(entry_);
}

bool PeerWatch::failed(int peer) const {
  std::lock_guard lock(mutex_);
  return failed_.count(peer) != 0;
}

std::optional<int> PeerWatch::peer_at(const std::string& address) const {
  for (size_t peer = 0; peer < sockets_.size(); ++peer) {
    const PeerSocket& socket = sockets_[peer];
    if ((!socket.address.empty() && socket.address == address) ||
        (!socket.pair_address.empty() && socket.pair_address == address)) {
      return static_cast<int>(peer);
    }
  }
  return std::nullopt;
}

void PeerWatch::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (waits_.empty()) {
      changed_.wait(lock, [&] { return stopping_ || !waits_.empty(); });
      continue;
    }
    changed_.wait_for(lock, kInterval, [&] { return stopping_; });
    if (stopping_) break;
    for (const WaitEntry& waiting : waits_) {
      if (failed_.count(waiting.peer) == 0 && connection_closed(waiting.peer)) failed_.insert(waiting.peer);
    }
    for (const WaitEntry& waiting : waits_) {
      if (failed_.count(waiting.peer) == 0) continue;
      if (waiting.receiving) {
        waiting.buffer->abortWaitRecv();
      } else {
        waiting.buffer->abortWaitSend();
      }
    }
  }
}

/// Gloo closes a connection's socket when the connection fails (the peer closed or reset it, a
/// write failed, a wait timed out): the descriptor is then gone or another file.
bool PeerWatch::connection_closed(int peer) const {
  const PeerSocket& socket = sockets_.at(static_cast<size_t>(peer));
  if (socket.fd < 0) return false;  // not found after the rendezvous: not watched
  struct stat now {};
  return ::fstat(socket.fd, &now) != 0 || now.st_ino != socket.inode;
}

}  // namespace dtrain::worker
