#include "worker/runtime/agent_connection.h"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "worker/contract/wire.h"

namespace dtrain::worker {
namespace {

using nlohmann::json;
namespace wire = dtrain::contract::wire;

// Replies to simple requests come from the supervisor within a round trip; this only bounds a
// supervisor that is alive but not answering.
constexpr Millis kRequestTimeout{60'000};
// kv.wait: the store's own timeout fires first and names the missing keys; this is the margin.
constexpr Millis kWaitGrace{10'000};

// The agent runs as the user who runs its workers. A listener of another uid is someone who
// got a socket into our runtime directory's place; anything sent to it (hello, kv.set of
// rendezvous ids) would be theirs, and anything read from it (kv.get) could be forged. So the
// check comes before the first byte is sent.
Status check_listener_uid(int fd, const std::string& path) {
  ucred peer{};
  socklen_t length = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
    return Error{"DTRAIN_AGENT_SOCKET='" + path + "': cannot learn who listens there (SO_PEERCRED: " +
                 std::strerror(errno) + "); nothing was sent"};
  }
  if (peer.uid != ::geteuid()) {
    return Error{"DTRAIN_AGENT_SOCKET='" + path + "': the process listening there (pid " +
                 std::to_string(peer.pid) + ") runs as uid " + std::to_string(peer.uid) +
                 ", not as this worker's uid " + std::to_string(::geteuid()) +
                 ", so it is not our dtrain agent; nothing was sent. Fix: check who owns the "
                 "directories of that path (another user may have planted the socket)"};
  }
  return {};
}

}  // namespace

Result<std::shared_ptr<AgentConnection>> AgentConnection::connect(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return Error{"DTRAIN_AGENT_SOCKET='" + path + "' is " + std::to_string(path.size()) +
                 " bytes; a unix socket path must be shorter than " + std::to_string(sizeof(address.sun_path))};
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error{"agent socket: socket(): " + std::string(std::strerror(errno))};
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int saved = errno;
    ::close(fd);
    return Error{"cannot connect to the dtrain agent at DTRAIN_AGENT_SOCKET='" + path +
                 "': " + std::strerror(saved) + " (is the agent still running?)"};
  }
  if (Status trusted = check_listener_uid(fd, path); !trusted) {
    ::close(fd);
    return trusted.error();
  }
  std::shared_ptr<AgentConnection> connection(new AgentConnection(fd, path));
  connection->reader_ = std::thread([raw = connection.get()] { raw->read_loop(); });
  return connection;
}

AgentConnection::AgentConnection(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

AgentConnection::~AgentConnection() {
  ::shutdown(fd_, SHUT_RDWR);  // wakes the reader
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
}

Status AgentConnection::send(const json& message) {
  return send_line(message.dump(-1, ' ', false, json::error_handler_t::replace));
}

Status AgentConnection::send_line(std::string line) {
  line += '\n';
  std::lock_guard lock(write_mutex_);
  size_t done = 0;
  while (done < line.size()) {
    // MSG_NOSIGNAL: a gone agent must be an error here, not a SIGPIPE that kills training.
    ssize_t n = ::send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error{"lost the dtrain agent (DTRAIN_AGENT_SOCKET='" + path_ + "'): send: " +
                   std::strerror(errno)};
    }
    done += static_cast<size_t>(n);
  }
  return {};
}

Result<json> AgentConnection::request(json message, Millis timeout) {
  int64_t id;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return Error{closed_reason_};
    id = next_id_++;
    waiting_.insert(id);
  }
  message["id"] = id;
  std::string type = message.value("type", "request");
  if (Status sent = send(message); !sent) {
    std::lock_guard lock(mutex_);
    waiting_.erase(id);
    return sent.error();
  }
  std::unique_lock lock(mutex_);
  bool answered = replied_.wait_for(lock, timeout, [&] {
    return replies_.contains(id) || closed_ || abandoned_.contains(id);
  });
  waiting_.erase(id);
  if (abandoned_.erase(id) > 0) {
    replies_.erase(id);
    return Error{type + ": abandoned: the dtrain agent announced generation " +
                 std::to_string(announced_generation_.value_or(-1)) + " (gen.changed) while it waited"};
  }
  if (!replies_.contains(id)) {
    if (closed_) return Error{type + ": " + closed_reason_};
    return Error{type + ": no reply from the dtrain agent within " + std::to_string(timeout.count()) +
                 "ms (supervisor overloaded or gone?)"};
  }
  (void)answered;
  json reply = std::move(replies_[id]);
  replies_.erase(id);
  // A reply is read with type checks: a field of the wrong type is an error naming it, never
  // a json exception that would end the worker.
  auto type_field = reply.find("type");
  if (type_field != reply.end() && type_field->is_string() && *type_field == wire::kError) {
    auto error = reply.find("error");
    return Error{error != reply.end() && error->is_string() ? error->get<std::string>()
                                                            : type + ": the store refused the request"};
  }
  return reply;
}

void AgentConnection::read_loop() {
  std::string buffer;
  char chunk[65536];
  for (;;) {
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close_with("the dtrain agent closed the connection (DTRAIN_AGENT_SOCKET='" + path_ +
                 "'); the job is stopping or the agent died");
      return;
    }
    buffer.append(chunk, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t newline; (newline = buffer.find('\n', start)) != std::string::npos; start = newline + 1) {
      json reply = json::parse(buffer.begin() + static_cast<std::ptrdiff_t>(start),
                               buffer.begin() + static_cast<std::ptrdiff_t>(newline), nullptr, false);
      // Type-checked: value("type", "") throws on a non-string "type", and on this thread an
      // exception would end the worker.
      auto type = reply.is_object() ? reply.find("type") : reply.end();
      if (reply.is_object() && type != reply.end() && type->is_string() && *type == wire::kCkptRequest) {
        note_checkpoint_request(reply);
        continue;
      }
      if (reply.is_object() && type != reply.end() && type->is_string() && *type == wire::kGenChanged) {
        note_generation_change(reply);
        continue;
      }
      if (reply.is_object() && type != reply.end() && type->is_string() && *type == wire::kAssign) {
        std::lock_guard lock(mutex_);
        assignment_ = std::move(reply);
        replied_.notify_all();
        continue;
      }
      if (!reply.is_object() || !reply.contains("id") || !reply["id"].is_number_integer()) continue;
      int64_t id = reply["id"].get<int64_t>();
      std::lock_guard lock(mutex_);
      if (waiting_.contains(id)) {
        replies_[id] = std::move(reply);
        replied_.notify_all();
      }
    }
    buffer.erase(0, start);
    if (buffer.size() > wire::kMaxLineBytes) {
      close_with("the dtrain agent sent a line over " + std::to_string(wire::kMaxLineBytes) + " bytes");
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
  }
}

void AgentConnection::note_checkpoint_request(const json& request) {
  int64_t step = request.contains("step") && request["step"].is_number_integer() ? request["step"].get<int64_t>() : 0;
  std::lock_guard lock(mutex_);
  if (step <= served_checkpoint_step_) return;  // saved already, when another rank of the group heard it first
  requested_checkpoint_step_ = step;  // a later request replaces an earlier one
  requested_checkpoint_reason_ = request.contains("reason") && request["reason"].is_string()
                                     ? request["reason"].get<std::string>()
                                     : std::string("requested by the supervisor");
}

void AgentConnection::checkpoint_request_served(int64_t step) {
  std::lock_guard lock(mutex_);
  served_checkpoint_step_ = std::max(served_checkpoint_step_, step);
  if (requested_checkpoint_step_ && *requested_checkpoint_step_ <= step) {
    requested_checkpoint_step_.reset();
    requested_checkpoint_reason_.clear();
  }
}

std::optional<std::string> AgentConnection::take_checkpoint_request(int64_t step) {
  std::lock_guard lock(mutex_);
  if (!requested_checkpoint_step_ || step < *requested_checkpoint_step_) return std::nullopt;
  requested_checkpoint_step_.reset();
  return std::exchange(requested_checkpoint_reason_, {});
}

void AgentConnection::note_generation_change(const json& change) {
  auto gen = change.find("gen");
  if (gen == change.end() || !gen->is_number_integer()) return;  // malformed: nothing to adopt
  int announced = gen->get<int>();
  std::function<void(int)> callback;
  {
    std::lock_guard lock(mutex_);
    if (!announced_generation_ || announced > *announced_generation_) {
      announced_generation_ = announced;
      callback = on_generation_announced_;  // news: the old generation's collectives end
    }
    abandoned_.insert(waiting_.begin(), waiting_.end());
    replied_.notify_all();
  }
  if (callback) callback(announced);
}

void AgentConnection::on_generation_announced(std::function<void(int)> callback) {
  std::lock_guard lock(mutex_);
  on_generation_announced_ = std::move(callback);
}

std::optional<int> AgentConnection::announced_generation() {
  std::lock_guard lock(mutex_);
  return announced_generation_;
}

Result<int> AgentConnection::wait_for_generation_after(int after, Millis timeout) {
  std::unique_lock lock(mutex_);
  auto newer = [&] { return announced_generation_ && *announced_generation_ > after; };
  replied_.wait_for(lock, timeout, [&] { return newer() || closed_; });
  if (newer()) return *announced_generation_;
  if (closed_) return Error{"waiting for gen.changed: " + closed_reason_};
  return Error{"no gen.changed (a generation after " + std::to_string(after) + ") from the dtrain agent within " +
               std::to_string(timeout.count()) + "ms"};
}

Result<json> AgentConnection::wait_for_assignment() {
  std::unique_lock lock(mutex_);
  replied_.wait(lock, [&] { return assignment_.has_value() || closed_; });
  if (!assignment_) return Error{"a standby waiting for its assign: " + closed_reason_};
  return *std::exchange(assignment_, std::nullopt);
}

void AgentConnection::close_with(std::string reason) {
  std::lock_guard lock(mutex_);
  if (!closed_) {
    closed_ = true;
    closed_reason_ = std::move(reason);
  }
  replied_.notify_all();
}

Status AgentKv::check_generation(const std::string& what) const {
  std::optional<int> announced = connection_->announced_generation();
  if (!announced || *announced <= generation_) return {};
  return Error{what + ": the store moved on to generation " + std::to_string(*announced) +
               " (gen.changed) and this worker is still in generation " + std::to_string(generation_)};
}

Status AgentKv::set(const std::string& key, const std::string& value) {
  if (Status fresh = check_generation("kv.set '" + key + "'"); !fresh) return fresh;
  Result<json> reply = connection_->request({{"type", wire::kKvSet}, {"key", key}, {"value", value}},
                                            kRequestTimeout);
  if (!reply) return reply.error();
  return {};
}

Result<std::optional<std::string>> AgentKv::get(const std::string& key) {
  if (Status fresh = check_generation("kv.get '" + key + "'"); !fresh) return fresh.error();
  Result<json> reply = connection_->request({{"type", wire::kKvGet}, {"key", key}}, kRequestTimeout);
  if (!reply) return reply.error();
  const json& value = (*reply)["value"];
  if (!value.is_string()) return std::optional<std::string>();
  return std::optional<std::string>(value.get<std::string>());
}

Result<std::vector<std::string>> AgentKv::wait(const std::vector<std::string>& keys, Millis timeout) {
  if (Status fresh = check_generation("kv.wait"); !fresh) return fresh.error();
  Result<json> reply = connection_->request(
      {{"type", wire::kKvWait}, {"keys", keys}, {"timeout_ms", timeout.count()}}, timeout + kWaitGrace);
  if (!reply) return reply.error();
  const json& values = (*reply)["values"];
  if (!values.is_array() || values.size() != keys.size()) {
    return Error{"kv.wait: malformed reply from the agent: " +
                 reply->dump(-1, ' ', false, json::error_handler_t::replace)};
  }
  std::vector<std::string> out;
  for (const json& value : values) out.push_back(value.is_string() ? value.get<std::string>() : "");
  return out;
}

Result<bool> AgentKv::generation_is_current() {
  Result<json> reply = connection_->request({{"type", wire::kGenCheck}}, kRequestTimeout);
  if (!reply) return reply.error();
  auto current = reply->find("current");
  if (current == reply->end() || !current->is_boolean()) {
    return Error{"gen.check: malformed reply from the agent (no boolean \"current\")"};
  }
  auto generation = reply->find("generation");
  if (generation != reply->end() && generation->is_number_integer() && generation->get<int>() != generation_) {
    return false;  // re-stamped by gen.changed, but this worker has not adopted that generation
  }
  return current->get<bool>();
}

}  // namespace dtrain::worker
