#include "listener/listener_state.h"

#include <new>

#include "keep_forever.h"
#include "listener/directory_service.h"
#include "stream_listener.h"

namespace tcp2rdma::preload {

ListenerState::~ListenerState() {
  forget_directory(this);
  if (listener_generation != fork_generation()) {
    transport::keep_forever(rdma_listener.release());
    transport::keep_forever(directory_listener.release());
  }
}

ListenerState* listener_state(const TrackedSocket* socket) noexcept {
  return static_cast<ListenerState*>(socket->listener_parts());
}

ListenerState* make_listener_state(TrackedSocket* socket) noexcept {
  if (ListenerState* state = listener_state(socket); state != nullptr) return state;
  std::unique_ptr<ListenerParts> fresh(new (std::nothrow) ListenerState);
  if (fresh == nullptr) return nullptr;
  return static_cast<ListenerState*>(socket->adopt_listener_parts(std::move(fresh)));
}

}  // namespace tcp2rdma::preload
