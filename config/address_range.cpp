#include "address_range.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace tcp2rdma::config {
namespace {

constexpr Ip6 kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};

bool parse_number(std::string_view text, unsigned max, unsigned* out) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value > max) return false;
  *out = value;
  return true;
}

}  // namespace

Ip6Words to_words(const Ip6& address) {
  Ip6Words words;
  for (int i = 0; i < 8; ++i) {
    words.hi = (words.hi << 8) | address[i];
    words.lo = (words.lo << 8) | address[8 + i];
  }
  return words;
}

std::string Cidr::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  bool v4 = prefix >= 96 && std::memcmp(base.data(), kMappedPrefix.data(), 12) == 0;
  if (v4) {
    inet_ntop(AF_INET, base.data() + 12, text, sizeof text);
    return std::string(text) + "/" + std::to_string(prefix - 96);
  }
  inet_ntop(AF_INET6, base.data(), text, sizeof text);
  return std::string(text) + "/" + std::to_string(prefix);
}

std::optional<Cidr> parse_cidr(std::string_view text, std::string* error) {
  std::string_view address = text, length;
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    address = text.substr(0, slash);
    length = text.substr(slash + 1);
  }
  std::string host(address);
  Cidr cidr;
  unsigned max_prefix = 128, offset = 0;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    cidr.base = kMappedPrefix;
    std::memcpy(cidr.base.data() + 12, &v4, 4);
    max_prefix = 32;
    offset = 96;
  } else if (inet_pton(AF_INET6, host.c_str(), cidr.base.data()) != 1) {
    *error = "expected an IPv4 or IPv6 address or CIDR block such as 10.0.0.0/8 or fd00::/8, got '" +
             std::string(text) + "'";
    return std::nullopt;
  }
  unsigned bits = max_prefix;
  if (!length.empty() || text.find('/') != std::string_view::npos) {
    if (!parse_number(length, max_prefix, &bits)) {
      *error = "bad prefix length in '" + std::string(text) + "': expected 0.." + std::to_string(max_prefix);
      return std::nullopt;
    }
  }
  cidr.prefix = static_cast<uint8_t>(bits + offset);
  // Host bits set below the prefix almost always mean a typo (10.1.2.3/8 for 10.0.0.0/8).
  Cidr network = cidr;
  for (unsigned bit = cidr.prefix; bit < 128; ++bit) network.base[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  if (network.base != cidr.base) {
    *error = "'" + std::string(text) + "' has host bits set: did you mean " + network.to_string() + "?";
    return std::nullopt;
  }
  Ip6 mask{};
  for (unsigned bit = 0; bit < cidr.prefix; ++bit) mask[bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  cidr.base_words = to_words(cidr.base);
  cidr.mask_words = to_words(mask);
  return cidr;
}

bool to_ip6(const sockaddr* address, Ip6* ip, uint16_t* port) {
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET) {
    sockaddr_in sin;
    std::memcpy(&sin, address, sizeof sin);
    *ip = kMappedPrefix;
    std::memcpy(ip->data() + 12, &sin.sin_addr, 4);
    *port = ntohs(sin.sin_port);
    return true;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, address, sizeof sin6);
    std::memcpy(ip->data(), &sin6.sin6_addr, 16);
    *port = ntohs(sin6.sin6_port);
    return true;
  }
  return false;
}

std::optional<PortRange> parse_port_range(std::string_view text, std::string* error) {
  std::string_view first = text, last = text;
  if (size_t dash = text.find('-'); dash != std::string_view::npos) {
    first = text.substr(0, dash);
    last = text.substr(dash + 1);
  }
  unsigned a = 0, b = 0;
  if (!parse_number(first, 65535, &a) || !parse_number(last, 65535, &b) || a == 0) {
    *error = "expected a port 1..65535 or a range such as 5000-5100, got '" + std::string(text) + "'";
    return std::nullopt;
  }
  if (a > b) {
    *error = "port range '" + std::string(text) + "' is reversed or empty: the first port must not exceed the last";
    return std::nullopt;
  }
  return PortRange{static_cast<uint16_t>(a), static_cast<uint16_t>(b)};
}

}  // namespace tcp2rdma::config
