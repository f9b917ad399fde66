#include "launcher/metrics/metrics_endpoint.h"

#include <pthread.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "launcher/metrics/prometheus_text.h"

namespace dtrain::metrics {

namespace {

constexpr size_t kMaxRequestBytes = 8192;      // a scrape's request is a few hundred bytes
constexpr int kMaxConnections = 16;            // Prometheus scrapes one at a time
constexpr auto kConnectionTimeout = std::chrono::seconds(10);

}  // namespace

// Handlers and exchanges point at the State with a plain pointer: the State outlives them.
// Stopping joins the thread, then the State's destruction destroys the io_context, which
// destroys every handler still pending (and the exchanges they keep alive) without running it.
// (Handlers holding a shared_ptr to the State made a cycle through the io_context: LeakSanitizer
// found the State, the io_context and a pending accept leaked at every stop.) `connections` is
// declared before `io` so that it is still alive while `io` destroys the exchanges.
struct MetricsEndpoint::State {
  std::atomic<int> connections{0};
  std::mutex mutex;
  std::string text;  ///< guarded by mutex
  uint16_t port = 0;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  std::thread thread;

  std::string latest() {
    std::lock_guard lock(mutex);
    return text;
  }
};

namespace {

using tcp = asio::ip::tcp;
using State = MetricsEndpoint::State;

/// One connection: read the request head, answer, close. Every request gets Connection: close.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(State* state, tcp::socket socket)
      : state_(state), socket_(std::move(socket)), timer_(state_->io) {}
  ~Exchange() { --state_->connections; }

  void begin() {
    auto self = shared_from_this();
    timer_.expires_after(kConnectionTimeout);
    timer_.async_wait([self](const asio::error_code& error) {
      if (!error) self->socket_.close();
    });
    asio::async_read_until(socket_, asio::dynamic_buffer(request_, kMaxRequestBytes), "\r\n\r\n",
                           [self](const asio::error_code& error, size_t) { self->answer(error); });
  }

 private:
  void answer(const asio::error_code& error) {
    if (error == asio::error::not_found) return respond("431 Request Header Fields Too Large", "request too large\n");
    if (error) return;
    std::string line = request_.substr(0, request_.find("\r\n"));
    size_t first = line.find(' ');
    size_t second = first == std::string::npos ? std::string::npos : line.find(' ', first + 1);
    std::string method = line.substr(0, first);
    std::string target = first == std::string::npos ? "" : line.substr(first + 1, second - first - 1);
    if (target.rfind("/metrics", 0) == 0 && (target.size() == 8 || target[8] == '?')) {
      if (method != "GET" && method != "HEAD") return respond("405 Method Not Allowed", "GET /metrics\n");
      return respond("200 OK", state_->latest(), PrometheusText::kContentType, method == "HEAD");
    }
    respond("404 Not Found", "dtrain serves GET /metrics only\n");
  }

  void respond(const std::string& status, std::string body, const char* type = "text/plain; charset=utf-8",
               bool head_only = false) {
    response_ = "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    if (!head_only) response_ += body;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(response_), [self](const asio::error_code&, size_t) {
      asio::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
      self->socket_.close(ignored);
      self->timer_.cancel();
    });
  }

  State* state_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string request_;
  std::string response_;
};

void accept_next(State* state) {
  state->acceptor.async_accept([state](const asio::error_code& error, tcp::socket socket) {
    if (error == asio::error::operation_aborted || !state->acceptor.is_open()) return;
    if (!error) {
      if (state->connections.load() >= kMaxConnections) {
        asio::error_code ignored;
        socket.close(ignored);  // too many at once: the client retries at its next scrape
      } else {
        ++state->connections;
        std::make_shared<Exchange>(state, std::move(socket))->begin();
      }
    }
    accept_next(state);
  });
}

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Error::user("metrics.listen '" + address + "': expected HOST:PORT");
  std::string host = address.substr(0, colon);
  int port = std::atoi(address.c_str() + colon + 1);
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  asio::error_code error;
  asio::ip::address ip = asio::ip::make_address(host, error);
  if (error || port < 1 || port > 65535) return Error::user("metrics.listen '" + address + "': expected HOST:PORT");
  if (!ip.is_loopback()) {
    return Error::user("metrics.listen '" + address + "': not a loopback address; the metrics endpoint listens on loopback only");
  }
  auto state = std::make_shared<State>();
  tcp::endpoint endpoint(ip, static_cast<uint16_t>(port));
  state->acceptor.open(endpoint.protocol(), error);
  if (!error) state->acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) state->acceptor.bind(endpoint, error);
  if (!error) state->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) return Error::infra("metrics.listen '" + address + "': cannot listen: " + error.message());
  state->port = state->acceptor.local_endpoint().port();
  accept_next(state.get());
  state->thread = std::thread([state = state.get()] {
    pthread_setname_np(pthread_self(), "dtrain-metrics");
    state->io.run();
  });
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(state));
}

MetricsEndpoint::~MetricsEndpoint() {
  asio::post(state_->io, [state = state_.get()] {
    asio::error_code ignored;
    state->acceptor.close(ignored);
    state->io.stop();
  });
  if (state_->thread.joinable()) state_->thread.join();
}

void MetricsEndpoint::publish(std::string text) {
  std::lock_guard lock(state_->mutex);
  state_->text = std::move(text);
}

uint16_t MetricsEndpoint::port() const { return state_->port; }

}  // namespace dtrain::metrics
