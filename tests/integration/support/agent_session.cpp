#include "tests/integration/support/agent_session.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>

namespace dtrain::test {
namespace {

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

AgentSession::AgentSession(std::string dtrain_path, std::string host) : host_(std::move(host)) {
  static std::atomic<int> counter{0};
  int serial = ++counter;
  run_id_ = "agenttest-" + std::to_string(::getpid()) + "-" + std::to_string(serial);
  runtime_dir_ = "/tmp/dtrain-" + std::to_string(::geteuid()) + "/t" + std::to_string(::getpid()) +
                 "-" + std::to_string(serial);
  transport::LocalTransport transport;
  transport::AgentTarget target;
  target.host = host_;
  target.dtrain_path = std::move(dtrain_path);
  auto started = transport.start_agent(target);
  if (!started) throw std::runtime_error(started.error().message);
  connection_.reset(static_cast<transport::LocalAgentConnection*>(started->release()));
}

AgentSession::~AgentSession() {
  connection_->shutdown(5000);
  // The agent removes these itself unless it was killed outright (a test does that).
  ::unlink((runtime_dir_ + "/" + host_ + ".sock").c_str());
  ::rmdir(runtime_dir_.c_str());
}

nlohmann::json AgentSession::config(const nlohmann::json& overrides) const {
  nlohmann::json message = {{"type", "config"},
                            {"protocol", proto::kProtocolVersion},
                            {"run_id", run_id_},
                            {"host", host_},
                            {"runtime_dir", runtime_dir_},
                            {"heartbeat_interval_ms", 200},
                            {"heartbeat_timeout_ms", 30'000},
                            {"supervisor_time_ms", 0}};
  message.update(overrides);
  return message;
}

std::optional<nlohmann::json> AgentSession::handshake(const nlohmann::json& overrides) {
  send(config(overrides));
  return wait_for_type("hello", 30'000);
}

void AgentSession::send(const nlohmann::json& message) { send_raw(proto::encode_frame(message)); }

void AgentSession::send_raw(std::string bytes) {
  connection_->send(std::move(bytes));
  connection_->pump();
}

void AgentSession::pump_once(int timeout_ms) {
  std::vector<pollfd> fds = connection_->poll_fds();
  if (fds.empty()) {
    ::poll(nullptr, 0, std::min(timeout_ms, 10));
  } else {
    ::poll(fds.data(), fds.size(), timeout_ms);
  }
  connection_->pump();
  decoder_.feed(connection_->take_received());
  diagnostics_ += connection_->take_diagnostics();
  for (;;) {
    auto next = decoder_.next();
    if (!next) {
      decode_error_ = next.error().message;
      return;
    }
    if (!next->has_value()) return;
    history_.push_back(std::move(**next));
    taken_.push_back(false);
  }
}

std::optional<nlohmann::json> AgentSession::wait_for(
    const std::function<bool(const nlohmann::json&)>& predicate, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  size_t checked = 0;
  for (;;) {
    for (size_t i = 0; i < history_.size(); ++i) {
      if (!taken_[i] && predicate(history_[i])) {
        taken_[i] = true;
        return history_[i];
      }
    }
    checked = history_.size();
    int64_t left = deadline - now_ms();
    if (left <= 0) return std::nullopt;
    if (connection_->closed() && checked == history_.size()) {
      pump_once(0);
      if (checked == history_.size()) return std::nullopt;
      continue;
    }
    pump_once(static_cast<int>(std::min<int64_t>(left, 50)));
  }
}

std::optional<nlohmann::json> AgentSession::wait_for_type(const std::string& type, int timeout_ms) {
  return wait_for([&](const nlohmann::json& m) { return m.value("type", "") == type; }, timeout_ms);
}

bool AgentSession::wait_closed(int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  while (!connection_->closed()) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return false;
    pump_once(static_cast<int>(std::min<int64_t>(left, 50)));
  }
  pump_once(0);
  return true;
}

const std::string& AgentSession::diagnostics() {
  diagnostics_ += connection_->take_diagnostics();
  return diagnostics_;
}

nlohmann::json spawn_message(int gen, const std::vector<int>& ranks,
                             const std::vector<std::string>& argv, const std::string& run_id) {
  nlohmann::json workers = nlohmann::json::array();
  int local_rank = 0;
  for (int rank : ranks) workers.push_back({{"rank", rank}, {"local_rank", local_rank++}});
  return {{"type", "spawn"},
          {"gen", gen},
          {"argv", argv},
          {"workdir", "/"},
          {"env", {{"DTRAIN_RUN_ID", run_id}}},
          {"workers", workers},
          {"log_tail_lines", 20}};
}

}  // namespace dtrain::test
