#pragma once
// The Gloo communicator's watch over its peers' connections (gloo_communicator.cpp). Gloo's TCP
// transport ends a wait when a connection breaks only if the message had not begun to arrive or
// leave (Pair::signalException skips the receive being read and unbound sends being written), so
// a survivor whose peer died mid-message waited the collective's whole timeout (seen in CI: a
// 3-rank ring, 60 s and counting with a 120 s timeout). Gloo does close the broken connection's
// socket: the watch knows each peer's socket since the rendezvous (fd and inode) and, while a
// wait is under way, looks every 250 ms whether the socket of the peer it waits on is gone, and
// aborts that wait.

#include <sys/types.h>

#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace gloo {
namespace rendezvous {
class Context;
}
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace dtrain::worker {

/// One peer's connection socket, found after the rendezvous.
struct PeerSocket {
  int fd = -1;  ///< -1: not found; the watch leaves that peer to Gloo
  ino_t inode = 0;
  std::string address;       ///< the socket's far end, as Gloo prints addresses: "[10.0.0.2]:41234"
  std::string pair_address;  ///< the peer's pair address for this rank, the same way
};

/// Every local TCP endpoint of this process as Gloo prints addresses, each followed by a space:
/// its listening sockets and its end of every connection.
std::string local_endpoints();

/// The socket of each peer's connection (by index in the context), just after
/// connectFullMesh. Of the two ends of a connection, the one whose pair address is lower
/// accepted it (its socket's local address is its pair address); the other connected to that
/// address, the peer's pair address for this rank, which `published(peer)` gives: the bytes the
/// peer wrote to the rendezvous store under its index (one address per other rank, in rank order,
/// as connectFullMesh lays them out), when known.
std::vector<PeerSocket> find_peer_sockets(gloo::rendezvous::Context& context,
                                          const std::function<std::optional<std::vector<char>>(int peer)>& published);

class PeerWatch {
  struct WaitEntry {
    gloo::transport::UnboundBuffer* buffer;
    int peer;
    bool receiving;
  };

 public:
  /// `sockets` by index (find_peer_sockets). The thread starts only when there is a peer.
  explicit PeerWatch(std::vector<PeerSocket> sockets);
  ~PeerWatch();  ///< stops and joins the thread
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// A wait for one buffer's transfer with one peer, watched while this lives: if the peer's
  /// socket goes, the buffer's wait (receive or send) is aborted.
  class Waiting {
   public:
    Waiting(PeerWatch& watch, gloo::transport::UnboundBuffer& buffer, int peer, bool receiving);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    PeerWatch& watch_;
    std::list<WaitEntry>::iterator entry_;
  };

  /// Whether the watch saw `peer`'s connection closed (and so aborted waits on it).
  bool failed(int peer) const;
  /// The socket found for `peer`.
  const PeerSocket& socket(int peer) const { return sockets_.at(static_cast<size_t>(peer)); }
  /// The index of the peer one of whose known addresses is `address` ("[ip]:port"), if any.
  std::optional<int> peer_at(const std::string& address) const;

 private:
  void run();
  bool connection_closed(int peer) const;

  std::vector<PeerSocket> sockets_;
  mutable std::mutex mutex_;  // everything below
  std::list<WaitEntry> waits_;  // the waits under way (a list: each Waiting holds its iterator)
  std::set<int> failed_;
  bool stopping_ = false;
  std::condition_variable changed_;
  std::thread thread_;  // last: started after, and joined before, what it reads
};

}  // namespace dtrain::worker
