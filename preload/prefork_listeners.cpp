#include "prefork_listeners.h"

#include <time.h>

#include "fd_table.h"
#include "log.h"
#include "stream_listener.h"
#include "upgrade.h"

namespace tcp2rdma::preload {
namespace {

// Calls f(fd, listener) for every descriptor of a tracked listener.
template <typename F>
void for_each_listener(F f) {
  int end = fd_table().high_water();
  for (int fd = 0; fd < end; ++fd) {
    TrackedSocket* socket = fd_table().find(fd);
    if (socket != nullptr && socket->role() == SocketRole::kListener) f(fd, socket);
  }
}

}  // namespace

void mark_listeners_to_hand_on() noexcept {
  unsigned here = fork_generation();
  for_each_listener([here](int, TrackedSocket* l) {
    // A process that accepts keeps its listener; it is not asked for the lock, which an accept
    // waiting for an RDMA request can hold for seconds.
    if (l->accept_generation.load() == here) {
      l->drop_after_fork.store(false);  // a copy inherited from the parent may say otherwise
      return;
    }
    std::lock_guard lock(l->listener_mutex);
    bool drop = l->rdma_listener != nullptr && l->listener_generation == here;
    l->drop_after_fork.store(drop);
    // Set before fork, so that the child's copy knows it may make the listener again.
    if (drop) l->rdma_handed_on.store(true);
  });
}

void hand_on_marked_listeners(bool forked) noexcept {
  for_each_listener([forked](int fd, TrackedSocket* l) {
    if (!l->drop_after_fork.exchange(false)) return;
    if (!forked) return;  // the fork failed: keep it (rdma_handed_on only allows a later remake here)
    std::lock_guard lock(l->listener_mutex);
    l->rdma_listener.reset();
    log_line("fd %d listener: forked before accepting: the RDMA listener goes to the process that accepts", fd);
  });
}

void claim_rdma_listener(int fd, TrackedSocket* listener) noexcept {
  if (!listener->rdma_handed_on.load()) return;
  unsigned here = fork_generation();
  {
    std::lock_guard lock(listener->listener_mutex);
    if (listener->rdma_listener != nullptr && listener->listener_generation == here) return;
    if (listener->claim_generation == here) return;  // tried already in this process
    listener->claim_generation = here;
    // An ancestor's listener, dropped there: this memory is only a copy of its state.
    (void)listener->rdma_listener.release();
  }
  // The parent drops its listener just after fork returns; a child that gets here first waits for
  // the port a little. (While the parent still holds it, rdma_bind_addr does not always say
  // EADDRINUSE: seen in CI as "no RDMA device". So every failure is retried for about a second.)
  transport::Status s = transport::Status::kAddressInUse;
  for (int attempt = 0; attempt < 20 && s != transport::Status::kOk; ++attempt) {
    if (attempt > 0) {
      timespec pause{0, 50 * 1000 * 1000};
      nanosleep(&pause, nullptr);
    }
    s = listen_rdma(fd, listener, /*log_failure=*/false);
  }
  if (s == transport::Status::kOk) {
    log_line("fd %d listener: RDMA listener made in this process of a pre-fork server", fd);
  } else {
    log_line("fd %d listener: no RDMA listener in this process (%s): its connections stay tcp", fd,
             s == transport::Status::kAddressInUse ? "another process of the server holds it" : transport::to_string(s));
  }
}

}  // namespace tcp2rdma::preload
