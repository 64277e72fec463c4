// An application's socket address as rdma_cm can use it. A dual-stack (AF_INET6) socket names an IPv4
// peer or local address in its IPv4-mapped form (::ffff:a.b.c.d, what every JVM and a server on [::]
// see); rdma_cm neither resolves nor binds such an address (it would look for an IPv6 GID), so an
// upgrade gives it the IPv4 address the connection really uses. Every other address is kept as it is,
// the IPv6 wildcard :: included (a dual-stack listener: see StreamListener::listen's ipv6_only).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace tcp2rdma::transport {

// The address rdma_cm is to be given for `address` (family, address and port; an IPv6 one's flow
// label and scope kept).
inline sockaddr_storage rdma_address(const sockaddr* address) {
  sockaddr_storage out{};
  if (address == nullptr) return out;
  if (address->sa_family == AF_INET) {
    std::memcpy(&out, address, sizeof(sockaddr_in));
    return out;
  }
  if (address->sa_family != AF_INET6) return out;
  const sockaddr_in6* v6 = reinterpret_cast<const sockaddr_in6*>(address);
  if (!IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
    std::memcpy(&out, v6, sizeof *v6);
    return out;
  }
  sockaddr_in* v4 = reinterpret_cast<sockaddr_in*>(&out);
  v4->sin_family = AF_INET;
  v4->sin_port = v6->sin6_port;
  std::memcpy(&v4->sin_addr, v6->sin6_addr.s6_addr + 12, 4);
  return out;
}

// Whether rdma_address(address) differs from `address` (an IPv4-mapped IPv6 address).
inline bool is_ipv4_mapped(const sockaddr* address) {
  return address != nullptr && address->sa_family == AF_INET6 &&
         IN6_IS_ADDR_V4MAPPED(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
}

}  // namespace tcp2rdma::transport
