#include "tracked_socket.h"

#include "rdma_stream.h"
#include "stream_listener.h"

namespace tcp2rdma::preload {

TrackedSocket::TrackedSocket(int domain, SocketRole role) : domain_(domain), role_(role) {}

void TrackedSocket::set_stream(std::unique_ptr<transport::RdmaStream> stream) noexcept {
  stream_.store(stream.release(), std::memory_order_release);
}

TrackedSocket::~TrackedSocket() {
  // The last descriptor is closed: like the kernel, deliver what was written before ending the
  // stream, even if the process exits right after close() (close() waits for the acknowledgements).
  if (transport::RdmaStream* s = stream_.load(std::memory_order_acquire)) {
    s->close();
    delete s;
  }
}

}  // namespace tcp2rdma::preload
