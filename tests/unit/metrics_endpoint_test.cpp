// The /metrics endpoint on loopback: GET /metrics answers the latest published text with the
// exposition's content type; other paths 404, other methods 405; an address that is not
// loopback is refused before anything listens.

#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "launcher/metrics/metrics_endpoint.h"

using namespace dtrain;

namespace {

std::string http_exchange(uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) reply.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return reply;
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t size = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace

TEST_CASE("GET /metrics on loopback answers the latest text") {
  uint16_t port = free_port();
  auto endpoint = metrics::MetricsEndpoint::start("127.0.0.1:" + std::to_string(port));
  REQUIRE_MESSAGE(endpoint, endpoint.error().message);
  CHECK((*endpoint)->port() == port);
  (*endpoint)->publish("dtrain_step 1\n");
  (*endpoint)->publish("dtrain_step 2\n");
  std::string reply = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  CHECK(reply.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(reply.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(reply.find("Content-Length: 14\r\n") != std::string::npos);
  CHECK(reply.substr(reply.size() - 14) == "dtrain_step 2\n");
  CHECK(http_exchange(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http_exchange(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(http_exchange(port, std::string(9000, 'x')).rfind("HTTP/1.1 431", 0) == 0);
}

TEST_CASE("an address that is not loopback, or no HOST:PORT, is refused") {
  auto open = metrics::MetricsEndpoint::start("0.0.0.0:9400");
  REQUIRE(!open);
  CHECK(open.error().message.find("not a loopback address") != std::string::npos);
  CHECK(!metrics::MetricsEndpoint::start("10.0.0.1:9400"));
  CHECK(!metrics::MetricsEndpoint::start("127.0.0.1"));
  CHECK(!metrics::MetricsEndpoint::start("127.0.0.1:70000"));
}
