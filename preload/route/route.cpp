#include "route/route.h"

namespace tcp2rdma::preload {

StreamRef current_stream(int fd) noexcept {
  SocketHold socket = SocketHold::of(fd);
  transport::RdmaStream* stream = socket ? socket->stream() : nullptr;
  if (stream == nullptr) return {};
  return StreamRef(std::move(socket), stream);
}

}  // namespace tcp2rdma::preload
