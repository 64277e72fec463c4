#include "back_to_tcp/failover_record.h"

#include <cstring>

#include "util/little_endian.h"

namespace tcp2rdma::preload {

std::array<uint8_t, kFailoverSize> encode_failover(const FailoverRecord& record) {
  std::array<uint8_t, kFailoverSize> out{};
  put32(&out[0], kFailoverMagic);
  put16(&out[4], kFailoverVersion);
  put16(&out[6], record.write_shut ? kFailoverWriteShut : 0);
  put64(&out[8], record.received);
  put64(&out[16], record.sent);
  std::memcpy(&out[24], record.nonces.client.data(), 16);
  std::memcpy(&out[40], record.nonces.server.data(), 16);
  return out;
}

std::optional<FailoverRecord> decode_failover(std::span<const uint8_t, kFailoverSize> bytes, const NoncePair& ours) {
  if (get_le(&bytes[0], 4) != kFailoverMagic || get_le(&bytes[4], 2) != kFailoverVersion) return std::nullopt;
  auto flags = static_cast<uint16_t>(get_le(&bytes[6], 2));
  if ((flags & ~kFailoverWriteShut) != 0) return std::nullopt;
  FailoverRecord r;
  r.write_shut = (flags & kFailoverWriteShut) != 0;
  r.received = get_le(&bytes[8], 8);
  r.sent = get_le(&bytes[16], 8);
  std::memcpy(r.nonces.client.data(), &bytes[24], 16);
  std::memcpy(r.nonces.server.data(), &bytes[40], 16);
  if (!(r.nonces == ours)) return std::nullopt;
  return r;
}

}  // namespace tcp2rdma::preload
