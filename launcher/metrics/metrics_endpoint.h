#pragma once
// The opt-in /metrics endpoint (metrics.listen): HTTP/1.1 on a loopback address only, on a thread
// of its own, so a scrape never waits on the driver's loop and a slow or hostile client never
// stalls it. The driver publishes each new exposition; a scrape gets the latest one.

#include <cstdint>
#include <memory>
#include <string>

#include "launcher/base/result.h"

namespace dtrain::metrics {

class MetricsEndpoint {
 public:
  /// Listens on `address` ("127.0.0.1:9400", "localhost:9400", "[::1]:9400"); a non-loopback
  /// address, a bad port or a port in use is an error that says which.
  static Result<std::unique_ptr<MetricsEndpoint>> start(const std::string& address);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  /// The text every later GET /metrics answers with.
  void publish(std::string text);
  uint16_t port() const;

  struct State;

 private:
  explicit MetricsEndpoint(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace dtrain::metrics
