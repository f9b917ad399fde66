// Gloo back end: TCP transport, rendezvous through our KV store (so it works across hosts and
// is scoped to the generation), every collective with its own timeout. Gloo reports failures
// by throwing; nothing is thrown past this file.
#include <arpa/inet.h>
#include <signal.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <regex>

#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "worker/runtime/communicators.h"
#include "worker/runtime/gloo_peer_watch.h"

namespace dtrain::worker {
namespace {

constexpr const char* kKeyPrefix = "gloo/";
constexpr const char* kEndpointsPrefix = "gloo-endpoints/";
// Gloo's own algorithms use slot prefixes 0x01-0x08 (gloo/types.h); point to point and the
// ring all-reduce have their own.
constexpr uint8_t kPointToPointSlotPrefix = 0x70;
constexpr uint8_t kRingSlotPrefix = 0x71;

/// gloo::rendezvous::Store over our KV store, in the namespace of one group (each group's
/// context rendezvouses separately). Values are hex so that any byte survives JSON.
///
/// Every store call is a round trip through the agent (and, across hosts, to the supervisor),
/// and Gloo's connectFullMesh asks key by key: a host name from each lower rank, then for
/// each peer a wait and a get of its addresses — 8 to 11 sequential round trips in a group of
/// four. This store answers the first question of each kind by waiting for every key of that
/// kind at once and keeps the answers: 4 round trips whatever the group size, which is most
/// of what an in-place rejoin costs. Waiting for all at once cannot deadlock: every rank
/// publishes before it waits.
class KvGlooStore final : public gloo::rendezvous::Store {
 public:
  KvGlooStore(KvClient& kv, const std::string& group_key, int index, int size, Millis timeout)
      : kv_(kv), prefix_(kKeyPrefix + group_key), index_(index), size_(size), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status status = kv_.set(prefix_ + key, to_hex(data));
    if (!status) throw gloo::IoException("rendezvous store: " + status.error().message);
  }
  std::vector<char> get(const std::string& key) override {
    fetch({key}, timeout_);
    return known_.at(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    fetch(keys, timeout);
  }
  /// A value already fetched, if any.
  std::optional<std::vector<char>> known(const std::string& key) const {
    auto found = known_.find(key);
    if (found == known_.end()) return std::nullopt;
    return found->second;
  }


  static std::string to_hex(const std::vector<char>& data) {
    static const char* digits = "0123456789abcdef";
    std::string hex;
    hex.reserve(data.size() * 2);
    for (char c : data) {
      auto byte = static_cast<unsigned char>(c);
      hex += digits[byte >> 4];
      hex += digits[byte & 15];
    }
    return hex;
  }
  static std::vector<char> from_hex(const std::string& hex) {
    auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    std::vector<char> data(hex.size() / 2);
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<char>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
    }
    return data;
  }

 private:
  /// The keys that connectFullMesh will ask for along with `key`: the host names of the lower
  /// ranks ("rank_<i>", i < index) or the addresses of every peer ("<i>"). Others alone.
  std::vector<std::string> kind_of(const std::string& key) const {
    std::vector<std::string> keys;
    if (key.rfind("rank_", 0) == 0) {
      for (int i = 0; i < index_; ++i) keys.push_back("rank_" + std::to_string(i));
    } else if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
      for (int i = 0; i < size_; ++i) {
        if (i != index_) keys.push_back(std::to_string(i));
      }
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    return keys;
  }

  void fetch(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (known_.count(key) != 0) continue;
      for (const std::string& companion : kind_of(key)) {
        if (known_.count(companion) == 0 && std::find(missing.begin(), missing.end(), companion) == missing.end()) {
          missing.push_back(companion);
        }
      }
    }
    if (missing.empty()) return;
    std::vector<std::string> prefixed;
    for (const std::string& key : missing) prefixed.push_back(prefix_ + key);
    Result<std::vector<std::string>> values = kv_.wait(prefixed, timeout);
    if (!values) throw gloo::IoException("rendezvous store: " + values.error().message);
    for (size_t i = 0; i < missing.size(); ++i) known_[missing[i]] = from_hex((*values)[i]);
  }

  KvClient& kv_;
  std::string prefix_;
  int index_;
  int size_;
  Millis timeout_;
  std::map<std::string, std::vector<char>> known_;
};

/// The local address that routes toward MASTER_ADDR: loopback for a one-host job, the right
/// interface on a multi-homed host. connect() on a UDP socket sends nothing.
std::string local_address_toward(const std::string& master_addr) {
  if (master_addr.empty()) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master_addr.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "127.0.0.1";
  std::string address = "127.0.0.1";
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET_ADDRSTRLEN];
      if (::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) address = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return address;
}

/// A transfer that the peer watch ended: that peer's connection closed.
struct PeerGone : std::runtime_error {
  PeerGone(int index, const std::string& what) : std::runtime_error(what), index(index) {}
  int index;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context, KvClient& kv, CommGroup group,
                   const std::shared_ptr<CommInterrupts>& interrupts, std::vector<PeerSocket> peer_sockets)
      : context_(std::move(context)),
        kv_(kv),
        group_(std::move(group)),
        sent_(group_.ranks.size(), 0),
        received_(group_.ranks.size(), 0),
        peer_watch_(std::move(peer_sockets)) {
    if (interrupts) {
      registration_ = CommInterrupts::add(interrupts, [this](const std::string& why) { interrupt(why); });
    }
  }
  ~GlooCommunicator() override {
    registration_.reset();  // before anything an interrupt touches is destroyed
  }

  /// A collective after this fails at once, saying so. The peers see this rank leave when the
  /// communicator is destroyed (its sockets close).
  void abort() override { interrupt("this rank left the communicator"); }

  const char* backend() const override { return "gloo"; }
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  // The all-reduces are this file's ring, not gloo::allreduce: every buffer they wait on is
  // this file's, so an interrupt can end the wait (see InFlight).
  Status allreduce_sum(float* data, size_t count, Millis timeout) override {
    return run("allreduce(float32 x " + std::to_string(count) + ")", timeout,
               [&] { ring_allreduce_sum(data, count, timeout); });
  }
  Status allreduce_sum(double* data, size_t count, Millis timeout) override {
    return run("allreduce(float64 x " + std::to_string(count) + ")", timeout,
               [&] { ring_allreduce_sum(data, count, timeout); });
  }
  Status broadcast(void* data, size_t bytes, int root, Millis timeout) override {
    return run("broadcast(" + std::to_string(bytes) + " bytes from rank " + std::to_string(root) + ")", timeout, [&] {
      // Gloo's binomial tree, on a buffer of ours: it waits on that buffer alone.
      gloo::BroadcastOptions options(context_);
      auto buffer = context_->createUnboundBuffer(data, bytes);
      InFlight tracked(*this, buffer.get());
      options.setOutput<uint8_t>(std::move(buffer));
      options.setRoot(root);
      options.setTimeout(timeout);
      options.setTag(next_tag());
      gloo::broadcast(options);
    });
  }
  Status barrier(Millis timeout) override {
    return run("barrier", timeout, [&] {
      float token = 0;
      ring_allreduce_sum(&token, 1, timeout);
    });
  }
  Status send_recv(const void* send_data, size_t send_bytes, int send_to, void* recv_data, size_t recv_bytes,
                   int recv_from, Millis timeout) override {
    std::string what = describe_send_recv(group_, send_bytes, send_to, recv_bytes, recv_from);
    return run(what, timeout, [&] {
      std::unique_ptr<gloo::transport::UnboundBuffer> outgoing, incoming;
      std::optional<InFlight> outgoing_tracked, incoming_tracked;
      // Gloo takes a mutable pointer for either direction; a send only reads it.
      if (send_to != kNoPeer) {
        outgoing = context_->createUnboundBuffer(const_cast<void*>(send_data), send_bytes);
        outgoing_tracked.emplace(*this, outgoing.get());
        outgoing->send(send_to, slot(rank(), send_to, sent_.at(static_cast<size_t>(send_to))++));
      }
      if (recv_from != kNoPeer) {
        incoming = context_->createUnboundBuffer(recv_data, recv_bytes);
        incoming_tracked.emplace(*this, incoming.get());
        incoming->recv(recv_from, slot(recv_from, rank(), received_.at(static_cast<size_t>(recv_from))++));
      }
      if (incoming) wait_recv(*incoming, recv_from, timeout);
      if (outgoing) wait_send(*outgoing, send_to, timeout);
    });
  }

 private:
  /// Registers a buffer that a collective is about to wait on, for interrupt(). Gloo does not
  /// end every wait when a connection breaks: Pair::signalException fails the sends queued on
  /// the socket (tx_: partly written, or refused with EPIPE) only for bound buffers, and not a
  /// receive whose message was arriving (rx_), so such a wait lasted the collective's whole
  /// timeout (two survivors caught so, in a reproduction, with no socket left open). Aborting
  /// the buffer's waits ends it. Registered after an interrupt: aborted at once.
  class InFlight {
   public:
    InFlight(GlooCommunicator& owner, gloo::transport::UnboundBuffer* buffer) : owner_(owner), buffer_(buffer) {
      std::lock_guard lock(owner_.interrupted_mutex_);
      owner_.in_flight_.push_back(buffer_);
      if (owner_.interrupted_) {
        buffer_->abortWaitSend();
        buffer_->abortWaitRecv();
      }
    }
    ~InFlight() {
      std::lock_guard lock(owner_.interrupted_mutex_);
      std::erase(owner_.in_flight_, buffer_);
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    GlooCommunicator& owner_;
    gloo::transport::UnboundBuffer* buffer_;
  };

  // Each wait is on one peer (an index in the group) and watched (gloo_peer_watch.h): Gloo
  // does not end every wait whose peer's connection broke.
  void wait_send(gloo::transport::UnboundBuffer& buffer, int peer, Millis timeout) {
    {
      PeerWatch::Waiting watched(peer_watch_, buffer, peer, false);
      if (buffer.waitSend(timeout)) return;
    }
    end_aborted_wait(peer, "send", [&] { return buffer.waitSend(Millis(1)); });
  }
  void wait_recv(gloo::transport::UnboundBuffer& buffer, int peer, Millis timeout) {
    {
      PeerWatch::Waiting watched(peer_watch_, buffer, peer, true);
      if (buffer.waitRecv(timeout)) return;
    }
    end_aborted_wait(peer, "receive", [&] { return buffer.waitRecv(Millis(1)); });
  }

  /// After an aborted wait: an interrupt, or `peer`'s connection failed. The abort may have
  /// come just after the transfer completed (a peer that sent its last message and exited):
  /// a completion already counted returns at once from `wait_again`, and the wait succeeded.
  /// Otherwise `wait_again` times out, which closes this context's connections; it is broken.
  template <class WaitAgain>
  void end_aborted_wait(int peer, const char* direction, WaitAgain wait_again) {
    if (interrupted() || !peer_watch_.failed(peer)) throw gloo::IoException(std::string(direction) + " interrupted");
    try {
      if (wait_again()) return;
    } catch (const std::exception&) {
    }
    throw PeerGone(peer, std::string("its connection (") + peer_watch_.socket(peer).address +
                             ") closed while a " + direction + " with it was under way");
  }

  /// Sum over the ring, in place: a reduce-scatter (size - 1 steps: pass chunk i on to the
  /// right neighbour while adding the one from the left) then an all-gather (size - 1 steps:
  /// pass the reduced chunks around). Each chunk is summed in one order, once, and copied to
  /// every rank: the result is bit-identical on every rank.
  template <class T>
  void ring_allreduce_sum(T* data, size_t count, Millis timeout) {
    const int ranks = size();
    if (ranks == 1 || count == 0) return;
    const int me = rank();
    const int right = (me + 1) % ranks;
    const int left = (me + ranks - 1) % ranks;
    auto first = [&](int chunk) { return count * static_cast<size_t>(chunk) / static_cast<size_t>(ranks); };
    auto length = [&](int chunk) { return first(chunk + 1) - first(chunk); };
    size_t largest = (count + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
    if (scratch_.size() < largest * sizeof(T)) scratch_.resize(largest * sizeof(T));
    const T* incoming = reinterpret_cast<const T*>(scratch_.data());

    auto whole = context_->createUnboundBuffer(data, count * sizeof(T));
    auto partial = context_->createUnboundBuffer(scratch_.data(), largest * sizeof(T));
    InFlight whole_tracked(*this, whole.get());
    InFlight partial_tracked(*this, partial.get());
    const uint64_t base = gloo::Slot::build(kRingSlotPrefix, next_tag());
    int step = 0;
    for (int round = 0; round < ranks - 1; ++round, ++step) {
      int sent = (me - round + ranks) % ranks;
      int received = (me - round - 1 + ranks) % ranks;
      partial->recv(left, base + step, 0, length(received) * sizeof(T));
      whole->send(right, base + step, first(sent) * sizeof(T), length(sent) * sizeof(T));
      wait_recv(*partial, left, timeout);
      T* target = data + first(received);
      for (size_t i = 0, n = length(received); i < n; ++i) target[i] += incoming[i];
      wait_send(*whole, right, timeout);
    }
    for (int round = 0; round < ranks - 1; ++round, ++step) {
      int sent = (me + 1 - round + ranks) % ranks;
      int received = (me - round + ranks) % ranks;
      whole->recv(left, base + step, first(received) * sizeof(T), length(received) * sizeof(T));
      whole->send(right, base + step, first(sent) * sizeof(T), length(sent) * sizeof(T));
      wait_recv(*whole, left, timeout);
      wait_send(*whole, right, timeout);
    }
  }

  uint32_t next_tag() { return tag_++; }
  int global(int index) const { return group_.ranks.at(static_cast<size_t>(index)); }

  /// The slot of the `sequence`-th message from index `from` to index `to`: both ends count
  /// their messages per peer and direction, so they compute the same slot without talking.
  static uint64_t slot(int from, int to, uint32_t sequence) {
    return gloo::Slot::build(kPointToPointSlotPrefix, (sequence << 1) | (from < to ? 0u : 1u));
  }

  /// From another thread (CommInterrupts): the collective waiting now ends (every buffer it
  /// waits on is this file's, and its waits are aborted), and so does any later one; run()
  /// says why.
  void interrupt(const std::string& why) {
    std::lock_guard lock(interrupted_mutex_);
    if (interrupted_) return;
    interrupted_ = why;
    for (gloo::transport::UnboundBuffer* buffer : in_flight_) {
      buffer->abortWaitSend();
      buffer->abortWaitRecv();
    }
  }
  std::optional<std::string> interrupted() {
    std::lock_guard lock(interrupted_mutex_);
    return interrupted_;
  }

  template <class Operation>
  Status run(const std::string& what, Millis timeout, Operation operation) {
    if (std::optional<std::string> why = interrupted()) return abandoned(what, *why);
    if (broken_) return Error{"gloo " + what + ": the communicator failed earlier: " + broken_reason_};
    try {
      operation();
      return {};
    } catch (const PeerGone& gone) {
      broken_ = true;
      broken_reason_ = gone.what();
      if (std::optional<std::string> why = interrupted()) return abandoned(what, *why);
      return Error{describe_failure(what, timeout, gone.what(), gone.index)};
    } catch (const std::exception& failure) {
      broken_ = true;
      broken_reason_ = failure.what();
      // Interrupted: the aborted wait is no peer's failure.
      if (std::optional<std::string> why = interrupted()) return abandoned(what, *why);
      return Error{describe_failure(what, timeout, failure.what())};
    }
  }

  Error abandoned(const std::string& what, const std::string& why) {
    broken_ = true;
    broken_reason_ = "interrupted: " + why;
    return Error{"gloo " + what + " on rank " + std::to_string(global(rank())) + " abandoned: " + why};
  }

  /// Names the peer when Gloo's message carries its address, else the whole group.
  std::string describe_failure(const std::string& what, Millis timeout, const std::string& cause,
                               std::optional<int> peer_index = std::nullopt) const {
    std::string message = "gloo " + what + " failed on rank " + std::to_string(global(rank()));
    message += group_.name.empty() ? " of " + std::to_string(size())
                                   : " (index " + std::to_string(rank()) + " of " + std::to_string(size()) +
                                         " in its " + group_.name + ")";
    message += ": ";
    std::optional<int> peer = peer_index ? std::optional<int>(global(*peer_index)) : peer_named_in(cause);
    if (peer) {
      return message + "peer rank " + std::to_string(*peer) + " is gone (crashed or killed?): " + cause;
    }
    std::string peers;
    for (int i = 0; i < size(); ++i) {
      if (i != rank()) peers += (peers.empty() ? "" : ",") + std::to_string(global(i));
    }
    bool timed_out = cause.find("imed out") != std::string::npos || cause.find("imeout") != std::string::npos;
    if (timed_out) {
      return message + "no progress within the " + std::to_string(timeout.count()) +
             "ms timeout; one of peer ranks " + peers + " is stopped, hung or too slow: " + cause;
    }
    return message + "peer ranks " + peers + ": " + cause;
  }

  /// The (global) rank whose published endpoints include the address in Gloo's message, if any.
  std::optional<int> peer_named_in(const std::string& cause) const {
    static const std::regex address_pattern(R"((\[[0-9.]+\]:)([0-9]+))");
    std::smatch match;
    if (!std::regex_search(cause, match, address_pattern)) return std::nullopt;
    // This Gloo prints some ports in network byte order: accept either reading.
    int port = std::stoi(match[2].str()) & 0xFFFF;
    int swapped = ((port & 0xFF) << 8) | (port >> 8);
    const std::string as_printed = match[1].str() + std::to_string(port);
    const std::string as_swapped = match[1].str() + std::to_string(swapped);
    // Gloo names the far end of the connection it lost (the peer's pair address, or the far
    // end of the socket): the peer watch knows both since the rendezvous.
    for (const std::string& address : {as_printed, as_swapped}) {
      if (std::optional<int> peer = peer_watch_.peer_at(address)) return global(*peer);
    }
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      Result<std::optional<std::string>> endpoints = kv_.get(kEndpointsPrefix + std::to_string(global(peer)));
      if (!endpoints || !endpoints->has_value()) continue;
      const std::string& list = **endpoints;  // each address followed by a space
      if (list.find(as_printed + " ") != std::string::npos || list.find(as_swapped + " ") != std::string::npos) {
        return global(peer);
      }
    }
    return std::nullopt;
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  KvClient& kv_;
  CommGroup group_;
  std::vector<uint32_t> sent_;      // messages sent to / received from each index
  std::vector<uint32_t> received_;
  uint32_t tag_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
  std::vector<char> scratch_;  // the ring's incoming chunk
  std::mutex interrupted_mutex_;  // interrupted_ and in_flight_
  std::optional<std::string> interrupted_;
  std::vector<gloo::transport::UnboundBuffer*> in_flight_;
  std::unique_ptr<CommInterrupts::Registration> registration_;
  PeerWatch peer_watch_;  // after context_: destroyed (its thread joined) first
};

}  // namespace

std::unique_ptr<Communicator> make_solo_communicator() {
  class Solo final : public Communicator {
   public:
    const char* backend() const override { return "solo"; }
    int rank() const override { return 0; }
    int size() const override { return 1; }
    Status allreduce_sum(float*, size_t, Millis) override { return {}; }
    Status allreduce_sum(double*, size_t, Millis) override { return {}; }
    Status broadcast(void*, size_t, int, Millis) override { return {}; }
    Status barrier(Millis) override { return {}; }
    Status send_recv(const void*, size_t, int send_to, void*, size_t, int recv_from, Millis) override {
      if (send_to == kNoPeer && recv_from == kNoPeer) return {};
      return Error{"internal bug: send/recv with a peer in a group of one"};
    }
  };
  return std::make_unique<Solo>();
}

CommGroup world_group(const Topology& topology) {
  CommGroup world;
  world.store_key = "world/";
  for (int rank = 0; rank < topology.world_size; ++rank) world.ranks.push_back(rank);
  world.index = topology.rank;
  return world;
}

std::string describe_send_recv(const CommGroup& group, size_t send_bytes, int send_to, size_t recv_bytes,
                               int recv_from) {
  std::string what = "send/recv(";
  if (send_to != Communicator::kNoPeer) {
    what += std::to_string(send_bytes) + " bytes to rank " + std::to_string(group.ranks.at(static_cast<size_t>(send_to)));
  }
  if (recv_from != Communicator::kNoPeer) {
    what += std::string(send_to != Communicator::kNoPeer ? ", " : "") + std::to_string(recv_bytes) +
            " bytes from rank " + std::to_string(group.ranks.at(static_cast<size_t>(recv_from)));
  }
  return what + ")";
}

Result<std::unique_ptr<Communicator>> make_gloo_communicator(KvClient& kv, const CommGroup& group,
                                                             const Settings& settings, Millis timeout,
                                                             std::shared_ptr<CommInterrupts> interrupts) {
  // Gloo writes to peer sockets with plain write(2): when a peer dies mid-collective, the default
  // SIGPIPE would kill this rank silently instead of letting Gloo raise the IoException that we
  // turn into "peer rank N is gone". Only a default disposition is changed; a program's own
  // handler stays.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }

  std::string host = local_address_toward(settings.master_addr);
  try {
    gloo::transport::tcp::attr attr(host.c_str());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(group.index, group.size());
    context->setTimeout(timeout);
    KvGlooStore store(kv, group.store_key, group.index, group.size(), timeout);
    context->connectFullMesh(store, device);
    // Best effort: without it errors name the whole group instead of the peer. A process in
    // several groups republishes a superset (every socket it has) after each.
    (void)kv.set(kEndpointsPrefix + std::to_string(group.global_rank()), local_endpoints());
    std::vector<PeerSocket> peer_sockets =
        find_peer_sockets(*context, [&](int peer) { return store.known(std::to_string(peer)); });
    return std::unique_ptr<Communicator>(
        std::make_unique<GlooCommunicator>(context, kv, group, interrupts, std::move(peer_sockets)));
  } catch (const std::exception& failure) {
    std::string where = group.name.empty() ? "" : " in its " + group.name;
    return Error{"gloo rendezvous of rank " + std::to_string(group.global_rank()) + where + " (index " +
                 std::to_string(group.index) + " of " + std::to_string(group.size()) + ", listening on " + host +
                 ", timeout " + std::to_string(timeout.count()) + "ms) failed: " + failure.what()};
  }
}

}  // namespace dtrain::worker
