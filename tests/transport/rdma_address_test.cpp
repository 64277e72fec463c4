// rdma_address(): what rdma_cm is given for an application's socket address (a dual-stack
// socket's IPv4 peers and local addresses appear IPv4-mapped; rdma_cm can use only the IPv4 form).
#include "rdma_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace tcp2rdma::transport {
namespace {

sockaddr_storage v6(const char* text, uint16_t port) {
  sockaddr_storage s{};
  auto* a = reinterpret_cast<sockaddr_in6*>(&s);
  a->sin6_family = AF_INET6;
  a->sin6_port = htons(port);
  a->sin6_scope_id = 3;
  EXPECT_EQ(inet_pton(AF_INET6, text, &a->sin6_addr), 1) << text;
  return s;
}

sockaddr_storage v4(const char* text, uint16_t port) {
  sockaddr_storage s{};
  auto* a = reinterpret_cast<sockaddr_in*>(&s);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, text, &a->sin_addr), 1) << text;
  return s;
}

const sockaddr* as_sockaddr(const sockaddr_storage& s) { return reinterpret_cast<const sockaddr*>(&s); }

TEST(RdmaAddress, AnIpv4MappedAddressBecomesTheIpv4AddressWithItsPort) {
  sockaddr_storage mapped = v6("::ffff:10.77.0.1", 5000);
  EXPECT_TRUE(is_ipv4_mapped(as_sockaddr(mapped)));
  sockaddr_storage used = rdma_address(as_sockaddr(mapped));
  sockaddr_storage want = v4("10.77.0.1", 5000);
  EXPECT_EQ(std::memcmp(&used, &want, sizeof used), 0);
}

TEST(RdmaAddress, IpFourNativeIpv6AndTheWildcardAreKept) {
  for (const sockaddr_storage& s : {v4("10.77.0.2", 80), v6("fd77::1", 443), v6("::", 8080), v6("::1", 1),
                                    v4("0.0.0.0", 9)}) {
    EXPECT_FALSE(is_ipv4_mapped(as_sockaddr(s)));
    sockaddr_storage used = rdma_address(as_sockaddr(s));
    EXPECT_EQ(std::memcmp(&used, &s, sizeof used), 0);
  }
  // ::ffff:0:0/96 only: an IPv4-compatible (::a.b.c.d) or a NAT64 address is IPv6.
  EXPECT_FALSE(is_ipv4_mapped(as_sockaddr(v6("::10.77.0.1", 1))));
  EXPECT_FALSE(is_ipv4_mapped(as_sockaddr(v6("64:ff9b::10.77.0.1", 1))));
}

TEST(RdmaAddress, AnotherFamilyOrNoAddressGivesNone) {
  // Storage as large as any address, as a caller's would be: the function reads past a bare sockaddr
  // only for AF_INET6, which the compiler cannot rule out (-Warray-bounds at -O1).
  sockaddr_storage unix_socket{};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_EQ(rdma_address(reinterpret_cast<sockaddr*>(&unix_socket)).ss_family, AF_UNSPEC);
  EXPECT_EQ(rdma_address(nullptr).ss_family, AF_UNSPEC);
  EXPECT_FALSE(is_ipv4_mapped(nullptr));
}

}  // namespace
}  // namespace tcp2rdma::transport
