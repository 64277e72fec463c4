// Hashing a TcpTuple (wire.h), and its client's address, for the tables that find a connection's
// request or a client's latest word among thousands (the upgrade engine's waits, a listener's record
// of when each client last asked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "wire.h"

namespace tcp2rdma::transport {

// FNV-1a over the bytes: tuples are short, and no attacker chooses the table's size or gains from a
// collision more than a longer look at its own entries.
inline size_t hash_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return static_cast<size_t>(h);
}

struct TupleHash {
  size_t operator()(const TcpTuple& t) const { return hash_bytes(&t, sizeof t); }
};
struct TupleEqual {
  bool operator()(const TcpTuple& a, const TcpTuple& b) const { return std::memcmp(&a, &b, sizeof a) == 0; }
};

// A client's address as a tuple names it: the family and the 16 address bytes.
struct ClientAddress {
  uint8_t family = 0;
  uint8_t addr[16] = {};
  explicit ClientAddress(const TcpTuple& t) : family(t.family) { std::memcpy(addr, t.client_addr, sizeof addr); }
  bool operator==(const ClientAddress& o) const { return family == o.family && std::memcmp(addr, o.addr, sizeof addr) == 0; }
};
struct ClientAddressHash {
  size_t operator()(const ClientAddress& a) const { return hash_bytes(a.addr, sizeof a.addr) ^ a.family; }
};

}  // namespace tcp2rdma::transport
