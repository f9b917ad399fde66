#include "launcher/agent/worker_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "launcher/base/json_fields.h"
#include "launcher/proto/worker_messages.h"
#include "worker/contract/wire.h"

namespace dtrain::agent {
namespace {

constexpr size_t kMaxSocketPath = sizeof(sockaddr_un{}.sun_path) - 1;  // 107 on Linux
constexpr size_t kMaxQueuedToWorker = 64 << 20;

std::string socket_file_name(const std::string& host) {
  std::string name;
  for (char c : host) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
    name += plain ? c : '_';
  }
  return (name.empty() ? "agent" : name) + ".sock";
}

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, kMaxSocketPath);
  return address;
}

// A leftover socket file from a dead agent is removed; one a live agent answers on is not ours.
Status claim_socket_path(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0) return {};
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address = socket_address(path);
  if (probe.valid() &&
      ::connect(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    return Error::infra("worker socket '" + path +
                        "' is in use by another live agent; is this host listed twice in the "
                        "spec, or is a previous run still alive?");
  }
  if (::unlink(path.c_str()) != 0) {
    return Error::infra("cannot remove stale socket '" + path + "': " + errno_text(errno));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<WorkerSocketServer>> WorkerSocketServer::open(
    const std::string& runtime_dir, const std::string& host, std::string log_prefix) {
  // The supervisor's path, whole; checked (and replaced if refused) by open_runtime_directory.
  std::string requested_path = runtime_dir + "/" + socket_file_name(host);
  // Checked before anything is made; a fallback base is 7 bytes longer, checked again below.
  auto too_long = [&](const std::string& path) {
    return Error::user("worker socket path '" + path + "' is " + std::to_string(path.size()) +
                       " bytes; a unix socket path must fit in " + std::to_string(kMaxSocketPath) +
                       "; use a shorter host name or DTRAIN_RUNTIME_BASE");
  };
  if (requested_path.size() > kMaxSocketPath) return too_long(requested_path);
  Result<RuntimeDirectoryChoice> directory = open_runtime_directory(runtime_dir);
  if (!directory) return directory.error();
  std::string path = directory->directory.path() + "/" + socket_file_name(host);
  if (path.size() > kMaxSocketPath) {
    remove_runtime_directory(*directory);
    return too_long(path);
  }
  if (Status claimed = claim_socket_path(path); !claimed) return claimed.error();
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return Error::infra("socket(AF_UNIX): " + errno_text(errno));
  sockaddr_un address = socket_address(path);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    return Error::infra("bind '" + path + "': " + errno_text(errno));
  }
  ::chmod(path.c_str(), 0600);
  if (::listen(listener.get(), 128) != 0) {
    return Error::infra("listen '" + path + "': " + errno_text(errno));
  }
  return std::unique_ptr<WorkerSocketServer>(new WorkerSocketServer(
      std::move(directory).value(), path, std::move(listener), std::move(log_prefix)));
}

std::string WorkerSocketServer::runtime_dir_note() const {
  if (!runtime_dir_.fell_back()) return "";
  return runtime_dir_.refused + "; this run's worker socket is in '" + runtime_dir_.directory.path() + "' instead";
}

WorkerSocketServer::WorkerSocketServer(RuntimeDirectoryChoice runtime_dir, std::string path,
                                       UniqueFd listener, std::string log_prefix)
    : runtime_dir_(std::move(runtime_dir)),
      path_(std::move(path)),
      listener_(std::move(listener)),
      log_prefix_(std::move(log_prefix)) {}

WorkerSocketServer::~WorkerSocketServer() {
  connections_.clear();
  listener_.reset();
  ::unlink(path_.c_str());
  remove_runtime_directory(runtime_dir_);  // fails harmlessly while other sockets are there
}

std::vector<pollfd> WorkerSocketServer::poll_fds(bool accept_input) const {
  std::vector<pollfd> fds;
  fds.push_back({listener_.get(), POLLIN, 0});
  for (const auto& [fd, connection] : connections_) {
    short events = accept_input ? POLLIN : 0;
    if (!connection.output.empty()) events |= POLLOUT;
    fds.push_back({fd, events, 0});
  }
  return fds;
}

void WorkerSocketServer::on_ready(int fd, short revents, const WorkerMessageSink& sink,
                                  const WorkerProblemSink& problems) {
  if (fd == listener_.get()) {
    accept_all();
    return;
  }
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (revents & POLLOUT) write_to(it->second);
  it = connections_.find(fd);  // write_to may have dropped it
  if (it != connections_.end() && (revents & (POLLIN | POLLHUP | POLLERR))) {
    read_from(it->second, sink, problems);
  }
}

void WorkerSocketServer::drain_connections_of(pid_t peer_pid, const WorkerMessageSink& sink,
                                              const WorkerProblemSink& problems) {
  accept_all();  // its connection may still wait in the listener's queue
  std::vector<int> fds;
  for (const auto& [fd, connection] : connections_) {
    if (connection.peer_pid == peer_pid) fds.push_back(fd);
  }
  for (int fd : fds) {
    // Bounded: the process is gone, so what its buffer holds only shrinks (a child that shares
    // the socket could still write: at most 64 reads); read_from drops the connection at its end.
    for (int reads = 0; reads < 64; ++reads) {
      auto it = connections_.find(fd);
      if (it == connections_.end()) break;
      pollfd ready{fd, POLLIN, 0};
      if (::poll(&ready, 1, 0) <= 0 || ready.revents == 0) break;
      read_from(it->second, sink, problems);
    }
  }
}

void WorkerSocketServer::accept_all() {
  for (;;) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        std::fprintf(stderr, "%s: worker socket: accept: %s\n", log_prefix_.c_str(),
                     errno_text(errno).c_str());
      }
      return;
    }
    UniqueFd owned(fd);
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
      std::fprintf(stderr, "%s: worker socket: SO_PEERCRED: %s; connection refused\n",
                   log_prefix_.c_str(), errno_text(errno).c_str());
      continue;
    }
    if (peer.uid != ::geteuid()) {
      std::fprintf(stderr,
                   "%s: worker socket: refused a connection from pid %d of uid %u (the agent "
                   "runs as uid %u)\n",
                   log_prefix_.c_str(), static_cast<int>(peer.pid), peer.uid, ::geteuid());
      continue;
    }
    Connection& connection = connections_[fd];
    connection.fd = std::move(owned);
    connection.peer_pid = peer.pid;
    connection.serial = next_serial_++;
  }
}

void WorkerSocketServer::read_from(Connection& connection, const WorkerMessageSink& sink,
                                   const WorkerProblemSink& problems) {
  int fd = connection.fd.get();
  bool would_block = false;
  Result<size_t> got = read_some(fd, connection.input, &would_block);
  if (!got) return drop(fd, got.error().message);
  if (*got == 0 && !would_block) return drop(fd, "");  // the worker closed it
  size_t start = 0;
  for (;;) {
    size_t newline = connection.input.find('\n', start);
    if (newline == std::string::npos) break;
    std::string_view line(connection.input.data() + start, newline - start);
    if (line.size() > contract::wire::kMaxLineBytes) {
      return report(connection, problems,
                    "line of " + std::to_string(line.size()) + " bytes exceeds the " +
                        std::to_string(contract::wire::kMaxLineBytes) + "-byte limit",
                    /*close=*/true);
    }
    if (!handle_line(connection, line, sink, problems)) return;  // dropped
    start = newline + 1;
  }
  connection.input.erase(0, start);
  if (connection.input.size() > contract::wire::kMaxLineBytes) {
    report(connection, problems,
           "line exceeds the " + std::to_string(contract::wire::kMaxLineBytes) + "-byte limit without a newline",
           /*close=*/true);
  }
}

void WorkerSocketServer::report(Connection& connection, const WorkerProblemSink& problems, std::string error,
                                bool close) {
  WorkerLineProblem problem{connection.gen, connection.rank, connection.peer_pid, std::move(error), close};
  if (close) drop(connection.fd.get(), problem.error);  // invalidates `connection`
  if (problems) problems(problem);
}

bool WorkerSocketServer::handle_line(Connection& connection, std::string_view line, const WorkerMessageSink& sink,
                                     const WorkerProblemSink& problems) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;  // blank line
  if (connection.standby) {
    report(connection, problems, "a standby says nothing but its hello before it is assigned a rank", /*close=*/false);
    return true;
  }
  if (!connection.gen && proto::is_standby_hello(line)) {
    connection.standby = true;  // not forwarded: the supervisor knows no standbys, only what they become
    return true;
  }
  // The one place a worker's line becomes a typed message (proto/worker_messages.h).
  Result<proto::WorkerMessage> message = proto::parse_worker_line(line);
  if (!connection.gen) {
    // Until the hello we do not know whose connection this is: anything else ends it.
    const auto* hello = message ? std::get_if<proto::WorkerHello>(&*message) : nullptr;
    if (!hello) {
      report(connection, problems,
             "the first line must be hello {rank, gen, pid}: " +
                 (message ? std::string("got ") + proto::type_of(*message) : message.error().message),
             /*close=*/true);
      return false;
    }
    connection.rank = hello->rank;
    connection.gen = current_generation(hello->gen, hello->rank, connection.peer_pid);
    if (*connection.gen != hello->gen) {
      // A carried-over worker connecting late (or again): its hello names the generation of its
      // environment. It goes to the supervisor under the one the worker belongs to now, and the
      // worker hears of it right after (it missed the gen.changed of the recovery).
      sink(*connection.gen, hello->rank, connection.peer_pid, std::move(*message));
      tell_generation(connection, *connection.gen);  // written when poll says the socket takes it
      return true;
    }
  }
  if (!message) {
    // A request with a usable id is answered here, so the worker fails fast instead of waiting
    // out its own timeout for a reply the supervisor will never send (it never sees the line).
    if (std::optional<int64_t> id = proto::request_id_of(line)) {
      connection.output += json_compact(proto::to_json(proto::RequestFailed{*id, message.error().message}));
      connection.output += '\n';
    }
    report(connection, problems, message.error().message, /*close=*/false);
    return true;
  }
  sink(*connection.gen, *connection.rank, connection.peer_pid, std::move(*message));
  return true;
}

void WorkerSocketServer::write_to(Connection& connection) {
  while (!connection.output.empty()) {
    ssize_t n = ::send(connection.fd.get(), connection.output.data(), connection.output.size(),
                       MSG_NOSIGNAL);
    if (n > 0) {
      connection.output.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return drop(connection.fd.get(), "send: " + errno_text(errno));
  }
}

Status WorkerSocketServer::send_to(int gen, int rank, const nlohmann::json& message) {
  Connection* newest = nullptr;
  for (auto& [fd, connection] : connections_) {
    if (connection.gen == gen && connection.rank == rank &&
        (newest == nullptr || connection.serial > newest->serial)) {
      newest = &connection;
    }
  }
  if (newest == nullptr) {
    return Error::infra("no worker connection from rank " + std::to_string(rank) +
                        " of generation " + std::to_string(gen));
  }
  if (newest->output.size() > kMaxQueuedToWorker) {
    int fd = newest->fd.get();
    drop(fd, "the worker does not read its replies (over 64 MiB queued)");
    return Error::infra("rank " + std::to_string(rank) + " does not read its socket; closed it");
  }
  newest->output += json_compact(message);
  newest->output += '\n';
  write_to(*newest);
  return {};
}

size_t WorkerSocketServer::change_generation(int from, int to, int rank, pid_t worker_group) {
  moves_[{from, rank}] = {to, worker_group};
  std::vector<int> told;
  for (auto& [fd, connection] : connections_) {
    if (connection.gen == from && connection.rank == rank) {
      tell_generation(connection, to);
      told.push_back(fd);
    }
  }
  for (int fd : told) {
    // Not while iterating above: write_to drops a connection whose send fails.
    if (auto it = connections_.find(fd); it != connections_.end()) write_to(it->second);
  }
  return told.size();
}

bool WorkerSocketServer::is_standby_of(const Connection& connection, pid_t standby) {
  // The standby itself, or a process of its group (a launcher script that execs the program).
  return connection.standby && (connection.peer_pid == standby || ::getpgid(connection.peer_pid) == standby);
}

WorkerSocketServer::Connection* WorkerSocketServer::standby_connection(pid_t standby) {
  for (auto& [fd, connection] : connections_) {
    if (is_standby_of(connection, standby)) return &connection;
  }
  return nullptr;
}

bool WorkerSocketServer::standby_ready(pid_t standby) const {
  return std::any_of(connections_.begin(), connections_.end(),
                     [standby](const auto& entry) { return is_standby_of(entry.second, standby); });
}

Status WorkerSocketServer::assign_standby(pid_t standby, const proto::StandbyAssign& assign) {
  Connection* connection = standby_connection(standby);
  if (connection == nullptr) {
    return Error::infra("standby pid " + std::to_string(standby) + " has no connection waiting for its assign");
  }
  connection->standby = false;  // its next line is the hello of the worker it becomes
  connection->output += json_compact(proto::to_json(assign));
  connection->output += '\n';
  int fd = connection->fd.get();
  write_to(*connection);
  if (!connections_.contains(fd)) {
    return Error::infra("standby pid " + std::to_string(standby) + ": its connection failed while sending assign");
  }
  return {};
}

void WorkerSocketServer::forget_moves_of(pid_t worker_group) {
  std::erase_if(moves_, [worker_group](const auto& move) { return move.second.worker_group == worker_group; });
}

void WorkerSocketServer::tell_generation(Connection& connection, int gen) {
  connection.gen = gen;
  connection.output += json_compact(proto::to_json(proto::GenerationChanged{gen}));
  connection.output += '\n';
}

int WorkerSocketServer::current_generation(int gen, int rank, pid_t peer_pid) const {
  pid_t group = ::getpgid(peer_pid);
  // Chained: a worker carried from 0 to 1 and then from 1 to 2 is in 2.
  for (auto move = moves_.find({gen, rank}); move != moves_.end() && group > 0 && move->second.worker_group == group;
       move = moves_.find({gen, rank})) {
    gen = move->second.to;
  }
  return gen;
}

void WorkerSocketServer::drop(int fd, const std::string& why) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (!why.empty()) {
    std::string who = it->second.rank ? "rank " + std::to_string(*it->second.rank) + " (pid " +
                                            std::to_string(it->second.peer_pid) + ")"
                                      : "pid " + std::to_string(it->second.peer_pid);
    std::fprintf(stderr, "%s: worker socket: closed the connection from %s: %s\n",
                 log_prefix_.c_str(), who.c_str(), why.c_str());
  }
  connections_.erase(it);
}

}  // namespace dtrain::agent
