// The two nonces that name one RDMA connection in the records each side writes on its TCP socket: the
// switch's (upgrade/switch_frames.h) and the failover's (back_to_tcp/failover_record.h).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

namespace tcp2rdma::preload {

using Nonce = std::array<uint8_t, 16>;

// The client's nonce from its connect private data, the server's from its accept private data. Both
// ends hold the same pair once the RC connection is established.
struct NoncePair {
  Nonce client{};
  Nonce server{};
  bool operator==(const NoncePair&) const = default;
};

// The pair of a stream's 64-bit nonces (RdmaStream::client_nonce, server_nonce): they fill the first
// 8 bytes of the records' 16, in the host's order, as both ends of one connection run alike.
inline NoncePair nonce_pair(uint64_t client, uint64_t server) {
  NoncePair n;
  std::memcpy(n.client.data(), &client, sizeof client);
  std::memcpy(n.server.data(), &server, sizeof server);
  return n;
}

}  // namespace tcp2rdma::preload
