// Socket addresses from text for the config tests: "10.0.0.1" or "fd00::1", with a port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

namespace tcp2rdma::config {

inline sockaddr_storage endpoint(const char* host, uint16_t port) {
  sockaddr_storage s{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&s);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
  } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
  }
  return s;  // family AF_UNSPEC when `host` is neither
}

}  // namespace tcp2rdma::config
