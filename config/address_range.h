// CIDR blocks and port ranges, compiled once at load time and matched without allocation.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tcp2rdma::config {

// Every address is held as IPv6; IPv4 as IPv4-mapped (::ffff:a.b.c.d), so an IPv4 block matches an
// IPv4 peer whether the socket is AF_INET or AF_INET6 with a mapped address, and vice versa.
using Ip6 = std::array<uint8_t, 16>;

// An address as two big-endian 64-bit halves: what matching compares, two masked words at a time.
struct Ip6Words {
  uint64_t hi = 0;
  uint64_t lo = 0;
};
Ip6Words to_words(const Ip6& address);

struct Cidr {
  Ip6 base{};
  uint8_t prefix = 0;  // in IPv6 bits; an IPv4 /n is stored as /(96+n)
  Ip6Words base_words;  // base and mask, precomputed by parse_cidr
  Ip6Words mask_words;

  bool contains(const Ip6Words& address) const {
    return (address.hi & mask_words.hi) == base_words.hi && (address.lo & mask_words.lo) == base_words.lo;
  }
  bool contains(const Ip6& address) const { return contains(to_words(address)); }
  std::string to_string() const;
};

// "10.0.0.0/8", "fd00::/8", "192.168.1.7" (a single host), "::ffff:10.0.0.0/104".
std::optional<Cidr> parse_cidr(std::string_view text, std::string* error);

// An AF_INET or AF_INET6 socket address as Ip6 plus port; false for any other family.
bool to_ip6(const sockaddr* address, Ip6* ip, uint16_t* port);

struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
  bool contains(uint16_t port) const { return port >= first && port <= last; }
};

// "5201" or "5000-5100" (inclusive, first <= last, 1..65535).
std::optional<PortRange> parse_port_range(std::string_view text, std::string* error);

}  // namespace tcp2rdma::config
