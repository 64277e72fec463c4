// An IP address as a TcpTuple holds it (wire.h): IPv4, and IPv4-mapped IPv6 (::ffff:a.b.c.d, what a
// dual-stack socket shows for an IPv4 peer), in the first 4 of 16 bytes; IPv6 in all 16. Both ends of
// a connection must name it alike, whichever family their sockets are.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>

namespace tcp2rdma::transport {

// Writes the address of `s` into out[16] (zeroed first) and returns the family it is in the tuple's
// terms (AF_INET or AF_INET6), or 0 for any other family (out left zero).
inline uint8_t tuple_address(const sockaddr* s, uint8_t out[16]) {
  std::memset(out, 0, 16);
  if (s == nullptr) return 0;
  if (s->sa_family == AF_INET) {
    std::memcpy(out, &reinterpret_cast<const sockaddr_in*>(s)->sin_addr, 4);
    return AF_INET;
  }
  if (s->sa_family != AF_INET6) return 0;
  const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(s)->sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    std::memcpy(out, a.s6_addr + 12, 4);
    return AF_INET;
  }
  std::memcpy(out, a.s6_addr, 16);
  return AF_INET6;
}

}  // namespace tcp2rdma::transport
