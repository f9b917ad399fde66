#pragma once
// FakeAgent: plays the dtrain agent AND the supervisor's store for worker-runtime tests, so
// that dtrain-train (or any worker) can run multi-rank without the launcher. It serves the
// worker protocol (worker/contract/wire.h) on a unix socket, answers kv.* and gen.check from a
// real launcher/store KvStore, records every other message, and spawns workers with the
// worker environment of docs/architecture.md §3. Header-only: tests/CMakeLists.txt compiles each
// integration *_test.cpp on its own. Every process it starts is SIGKILLed and reaped by its
// destructor.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/store/kv_store.h"
#include "tests/store_json.h"

namespace dtrain::testing {

inline int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A temporary directory removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/dtrain-wt-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// One message a worker sent that the store does not answer (hello, beat, ckpt.*, bye).
struct ReceivedMessage {
  int rank = -1;
  int gen = -1;
  nlohmann::json msg;
};

class FakeAgent {
 public:
  /// Called with the store before each store request is handled (tests use it to start a newer
  /// generation at exactly the right moment).
  using RequestHook = std::function<void(JsonStore&, int rank, const nlohmann::json& request)>;

  explicit FakeAgent(int generation = 1) : generation_(generation) {
    socket_path_ = dir_.path() + "/agent.sock";
    store_.begin_generation(generation, steady_ms());
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path_.c_str(), sizeof(address.sun_path) - 1);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      std::abort();
    }
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) std::abort();
    wake_read_ = pipe_fds[0];
    wake_write_ = pipe_fds[1];
    thread_ = std::thread([this] { serve(); });
  }

  ~FakeAgent() {
    for (auto& [rank, pid] : pids_) {
      if (pid > 0 && !reaped_.count(rank)) {
        ::kill(pid, SIGCONT);
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
      }
    }
    char byte = 'x';
    (void)!::write(wake_write_, &byte, 1);
    thread_.join();
    for (auto& [fd, connection] : connections_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }

  const std::string& socket_path() const { return socket_path_; }
  const std::string& dir() const { return dir_.path(); }
  void set_hook(RequestHook hook) {
    std::lock_guard lock(mutex_);
    hook_ = std::move(hook);
  }

  /// The environment a dtrain agent would give rank `rank` of a one-host world.
  std::map<std::string, std::string> worker_env(int rank, int world_size) const {
    return {{"RANK", std::to_string(rank)},
            {"WORLD_SIZE", std::to_string(world_size)},
            {"LOCAL_RANK", std::to_string(rank)},
            {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
            {"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", "29500"},
            {"DTRAIN_RUN_ID", "test-run"},
            {"DTRAIN_GENERATION", std::to_string(generation_)},
            {"DTRAIN_AGENT_SOCKET", socket_path_},
            {"DTRAIN_BACKEND", "gloo"},
            {"DTRAIN_DP_RANK", std::to_string(rank)},
            {"DTRAIN_DP_SIZE", std::to_string(world_size)},
            {"DTRAIN_TP_RANK", "0"},
            {"DTRAIN_TP_SIZE", "1"},
            {"DTRAIN_PP_RANK", "0"},
            {"DTRAIN_PP_SIZE", "1"},
            {"DTRAIN_HEARTBEAT_INTERVAL_MS", "200"},
            {"OMP_NUM_THREADS", "1"}};
  }

  /// Starts `world_size` copies of argv, rank r with worker_env(r) plus `extra` (later wins);
  /// stdout+stderr of rank r go to log_path(r).
  void spawn(int world_size, const std::vector<std::string>& argv,
             const std::map<std::string, std::string>& extra = {}) {
    for (int rank = 0; rank < world_size; ++rank) {
      std::map<std::string, std::string> env = worker_env(rank, world_size);
      for (const auto& [key, value] : extra) env[key] = value;
      std::string log = log_path(rank);
      // Everything the child needs is built before fork: this process has threads (the agent
      // loop), and a malloc in the child can deadlock on a lock another thread held at fork
      // (it did under ASan: the worker never started). The child only opens, dups and execs.
      env.emplace("PATH", "/usr/bin:/bin");
      std::vector<std::string> env_lines;
      for (const auto& [key, value] : env) env_lines.push_back(key + "=" + value);
      std::vector<char*> envp;
      for (std::string& line : env_lines) envp.push_back(line.data());
      envp.push_back(nullptr);
      std::vector<std::string> argv_copy = argv;
      std::vector<char*> args;
      for (std::string& arg : argv_copy) args.push_back(arg.data());
      args.push_back(nullptr);
      pid_t pid = ::fork();
      if (pid == 0) {
        int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::execve(args[0], args.data(), envp.data());
        ::_exit(127);
      }
      pids_[rank] = pid;
      reaped_.erase(rank);
    }
  }

  std::string log_path(int rank) const { return dir_.path() + "/rank-" + std::to_string(rank) + ".log"; }
  std::string log(int rank) const { return read_text(log_path(rank)); }
  pid_t pid(int rank) const { return pids_.at(rank); }

  /// Waits for rank's process; returns its wait status, or nullopt at the deadline.
  std::optional<int> wait_exit(int rank, std::chrono::milliseconds timeout) {
    if (auto done = reaped_.find(rank); done != reaped_.end()) return done->second;
    int64_t deadline = steady_ms() + timeout.count();
    for (;;) {
      int status = 0;
      pid_t got = ::waitpid(pids_.at(rank), &status, WNOHANG);
      if (got == pids_.at(rank)) {
        reaped_[rank] = status;
        return status;
      }
      if (steady_ms() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// Waits for every spawned rank; true when all exited 0.
  bool wait_all_ok(std::chrono::milliseconds timeout) {
    int64_t deadline = steady_ms() + timeout.count();
    bool ok = true;
    for (auto& [rank, pid] : pids_) {
      auto status = wait_exit(rank, std::chrono::milliseconds(std::max<int64_t>(1, deadline - steady_ms())));
      ok = ok && status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
    }
    // A worker's last lines (its bye) may still be unread when it is reaped: wait (a little)
    // for the server to read every connection to its end, as the real agent drains a dead
    // worker's socket before it reports the exit. A connection kept open by a process the
    // worker left behind ends the wait at its bound.
    int64_t settle_deadline = std::min(deadline, steady_ms() + 5000);
    // Twice in a row, 5 ms apart: an accept and its count are not one step.
    for (int settled_in_a_row = 0; settled_in_a_row < 2 && steady_ms() < settle_deadline;) {
      settled_in_a_row = settled() ? settled_in_a_row + 1 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ok;
  }

  /// No connection open or waiting to be accepted: everything the workers wrote was read.
  bool settled() const {
    pollfd waiting{listen_fd_, POLLIN, 0};
    return ::poll(&waiting, 1, 0) == 0 && open_connections_ == 0;
  }

  std::vector<ReceivedMessage> received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }
  std::vector<ReceivedMessage> received_of_type(const std::string& type) const {
    std::vector<ReceivedMessage> out;
    for (const ReceivedMessage& message : received()) {
      if (message.msg.value("type", "") == type) out.push_back(message);
    }
    return out;
  }

  /// Polls until `predicate(received())` holds or the timeout passes.
  bool wait_for(const std::function<bool(const std::vector<ReceivedMessage>&)>& predicate,
                std::chrono::milliseconds timeout) const {
    int64_t deadline = steady_ms() + timeout.count();
    while (steady_ms() < deadline) {
      if (predicate(received())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return predicate(received());
  }

 private:
  struct Connection {
    std::string buffer;
    int rank = -1;
    int gen = -1;
  };

  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{wake_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, connection] : connections_) fds.push_back({fd, POLLIN, 0});
      int timeout = 100;
      {
        std::lock_guard lock(mutex_);
        if (auto deadline = store_.next_deadline_ms()) {
          timeout = static_cast<int>(std::clamp<int64_t>(*deadline - steady_ms(), 0, 100));
        }
      }
      ::poll(fds.data(), fds.size(), timeout);
      if (fds[0].revents != 0) return;
      {
        std::lock_guard lock(mutex_);
        route(store_.expire(steady_ms()));
      }
      if (fds[1].revents & POLLIN) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          connections_[fd] = Connection{};
          ++open_connections_;
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char chunk[65536];
        ssize_t n = ::read(fds[i].fd, chunk, sizeof(chunk));
        if (n <= 0) {
          Connection& gone = connections_[fds[i].fd];
          std::lock_guard lock(mutex_);
          if (gone.rank >= 0) {
            store_.forget({"localhost", gone.rank});
            if (fd_by_rank_[gone.rank] == fds[i].fd) fd_by_rank_.erase(gone.rank);
          }
          ::close(fds[i].fd);
          connections_.erase(fds[i].fd);
          --open_connections_;
          continue;
        }
        Connection& connection = connections_[fds[i].fd];
        connection.buffer.append(chunk, static_cast<size_t>(n));
        for (size_t newline; (newline = connection.buffer.find('\n')) != std::string::npos;) {
          std::string line = connection.buffer.substr(0, newline);
          connection.buffer.erase(0, newline + 1);
          handle_line(fds[i].fd, connection, line);
        }
      }
    }
  }

  void handle_line(int fd, Connection& connection, const std::string& line) {
    nlohmann::json msg = nlohmann::json::parse(line, nullptr, false);
    if (!msg.is_object()) return;
    std::string type = msg.value("type", "");
    std::lock_guard lock(mutex_);
    if (type == "hello") {
      connection.rank = msg.value("rank", -1);
      connection.gen = msg.value("gen", -1);
      fd_by_rank_[connection.rank] = fd;
    }
    if (type.rfind("kv.", 0) == 0 || type == "gen.check") {
      if (hook_) hook_(store_, connection.rank, msg);
      route(store_.handle({"localhost", connection.rank}, connection.gen, msg, steady_ms()));
      return;
    }
    received_.push_back({connection.rank, connection.gen, msg});
  }

  void route(const std::vector<JsonStoreReply>& replies) {
    for (const JsonStoreReply& reply : replies) {
      auto fd = fd_by_rank_.find(reply.to.rank);
      if (fd == fd_by_rank_.end()) continue;
      std::string line = reply.msg.dump() + "\n";
      (void)!::send(fd->second, line.data(), line.size(), MSG_NOSIGNAL);
    }
  }

  TempDir dir_;
  int generation_;
  std::string socket_path_;
  int listen_fd_ = -1;
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::thread thread_;
  std::atomic<int> open_connections_{0};  ///< accepted and not yet at their end (serve's count)
  mutable std::mutex mutex_;
  JsonStore store_;
  RequestHook hook_;
  std::map<int, Connection> connections_;  // serve() thread only
  std::map<int, int> fd_by_rank_;
  std::vector<ReceivedMessage> received_;
  std::map<int, pid_t> pids_;
  std::map<int, int> reaped_;
};

}  // namespace dtrain::testing
