#include "listener/prefork_listeners.h"

#include <time.h>
#include <unistd.h>

#include <mutex>
#include <new>

#include "keep_forever.h"
#include "libc/kept_descriptors.h"
#include "listener/directory_service.h"
#include "listener/listener_directory.h"
#include "listener/listener_state.h"
#include "listener/rdma_listener.h"
#include "registry/fd_table.h"
#include "stream_listener.h"
#include "util/log.h"

namespace tcp2rdma::preload {
namespace {

// Calls f(fd, socket, state) for every descriptor of a tracked listener with a listener state.
template <typename F>
void for_each_listener(F f) {
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    if (socket->role() != SocketRole::kListener) return;
    if (ListenerState* state = listener_state(socket.get()); state != nullptr) f(fd, socket.get(), state);
  });
}

// Before the first fork of a listener with an RDMA listener here: the family's directory, shared
// with every process forked from now on. Null when it cannot be mapped (then only one process of the
// family gets RDMA, as without a directory).
void make_directory(ListenerState* l, bool keeps_listener) {
  if (l->directory.load() != nullptr) return;
  int memfd = -1;
  ListenerDirectory* directory = ListenerDirectory::create(&memfd);
  if (directory == nullptr) return;
  if (keeps_listener) directory->claim_holder(getpid());
  l->directory_memfd.store(memfd);
  keep_from_application(memfd);  // an exec hands it on, after the child's close_range (inetd)
  l->directory.store(directory);
}

// Makes an RDMA listener on the listener's port with `make`, trying `attempts` times 50 ms apart: the
// process that held the port lets go of it a moment later (a parent just after fork returns, an
// exited holder as its descriptors close). Every failure is retried, not only a taken port: a port
// held on an overlapping address once read as "no RDMA device" (EADDRNOTAVAIL, now kAddressInUse too).
template <typename Make>
transport::Status retrying(int attempts, Make make) {
  transport::Status s = make();
  for (int attempt = 1; attempt < attempts && s != transport::Status::kOk; ++attempt) {
    timespec pause{0, 50 * 1000 * 1000};
    nanosleep(&pause, nullptr);
    s = make();
  }
  return s;
}

// A child that claims the port before its parent (nginx's master) dropped it waits about a second.
transport::Status take_listeners_port(int fd, TrackedSocket* listener) {
  return retrying(20, [&] { return listen_rdma(fd, listener, /*log_failure=*/false); });
}

void listen_on_own_port(int fd, TrackedSocket* socket, ListenerDirectory* directory) {
  if (listen_rdma_on_own_port(fd, socket) != transport::Status::kOk) return;  // logged
  ListenerState* listener = listener_state(socket);
  log_line("fd %d listener: RDMA listener on rdma_cm port %u of this process's own; the process holding the "
           "listener's port (pid %d) sends this process's requests here",
           fd, static_cast<unsigned>(listener->own_rdma_port), static_cast<int>(directory->holder()));
}

// A process with its own port, at each accept: when the process holding the listener's port has
// exited (nginx replaces its workers; a prefork worker ends after its quota), the first to notice
// takes the port over and answers for everyone, itself included (it keeps accepting on its own port).
// A connection whose request came while nobody held the port stays TCP.
void take_over_if_holder_died(int fd, TrackedSocket* socket, ListenerDirectory* directory) {
  pid_t holder = directory->holder();
  if (holder != 0 && process_alive(holder)) return;
  pid_t self = getpid();
  if (!directory->claim_holder(self)) return;  // another process was quicker
  // The port frees as the exited holder's descriptors close: normally at once.
  transport::Status s = retrying(5, [&] { return listen_rdma_for_directory(fd, socket); });
  if (s != transport::Status::kOk) {
    directory->release_holder(self);
    log_line("fd %d listener: the process holding the listener's port (pid %d) is gone, and the port could not be "
             "taken over (%s)",
             fd, static_cast<int>(holder), transport::to_string(s));
    return;
  }
  log_line("fd %d listener: took over the listener's port from pid %d, which is gone", fd, static_cast<int>(holder));
  start_directory_service(fd, listener_state(socket));
}

}  // namespace

void mark_listeners_to_hand_on() noexcept {
  unsigned here = fork_generation();
  for_each_listener([here](int, TrackedSocket*, ListenerState* l) {
    // A process that accepts keeps its listener; it is not asked for the lock, which an accept
    // waiting for an RDMA request can hold for seconds.
    if (l->accept_generation.load() == here) {
      l->drop_after_fork.store(false);  // a copy inherited from the parent may say otherwise
      if (l->rdma_listener != nullptr && l->listener_generation == here) {
        make_directory(l, /*keeps_listener=*/l->own_rdma_port == 0);
      }
      return;
    }
    std::lock_guard lock(l->mutex);
    // It holds the RDMA listener but never accepted: it drops it after the fork.
    bool drop = l->rdma_listener != nullptr && l->listener_generation == here;
    if (drop) make_directory(l, /*keeps_listener=*/false);
    l->drop_after_fork.store(drop);
    // Set before fork, so that the child's copy knows it may make the listener again.
    if (drop) l->rdma_handed_on.store(true);
  });
}

namespace {

// A listener this process accepts on and holds the RDMA listener's port of.
bool accepts_and_holds_port(const ListenerState* l) {
  unsigned here = fork_generation();
  return l->accept_generation.load() == here && l->rdma_listener != nullptr && l->listener_generation == here &&
         l->own_rdma_port == 0;
}

}  // namespace

void prepare_listeners_for_spawn() noexcept {
  for_each_listener([](int, TrackedSocket*, ListenerState* l) {
    if (accepts_and_holds_port(l)) make_directory(l, /*keeps_listener=*/true);
  });
}

void serve_listeners_after_spawn() noexcept {
  for_each_listener([](int fd, TrackedSocket*, ListenerState* l) {
    if (accepts_and_holds_port(l)) start_directory_service(fd, l);
  });
}

void hand_on_marked_listeners(bool forked) noexcept {
  for_each_listener([forked](int fd, TrackedSocket*, ListenerState* l) {
    if (!l->drop_after_fork.exchange(false)) {
      // A process that keeps the listener's port and accepts: the children forked now accept too,
      // and their requests come here first.
      bool holder = l->rdma_listener != nullptr && l->listener_generation == fork_generation() && l->own_rdma_port == 0;
      if (forked && holder) start_directory_service(fd, l);
      return;
    }
    if (!forked) return;  // the fork failed: keep it (rdma_handed_on only allows a later remake here)
    stop_directory_service(l);
    std::lock_guard lock(l->mutex);
    if (ListenerDirectory* directory = l->directory.load(); directory != nullptr) directory->release_holder(getpid());
    l->rdma_listener.reset();
    l->directory_listener.reset();
    log_line("fd %d listener: forked before accepting: the RDMA listener goes to the process that accepts", fd);
  });
}

void drop_listeners_for_credentials() noexcept {
  unsigned here = fork_generation();
  for_each_listener([here](int fd, TrackedSocket*, ListenerState* l) {
    if (l->listener_generation != here || (l->rdma_listener == nullptr && l->directory_listener == nullptr)) return;
    stop_directory_service(l);
    std::lock_guard lock(l->mutex);
    if (ListenerDirectory* directory = l->directory.load(); directory != nullptr) directory->release_holder(getpid());
    l->rdma_listener.reset();
    l->directory_listener.reset();
    l->own_rdma_port = 0;
    l->claim_generation = ~0u;
    l->rdma_handed_on.store(true);
    log_line("fd %d listener: the process changes its credentials: the RDMA listener is made again under the new ones",
             fd);
  });
}

void renew_listener_locks() noexcept {
  for_each_listener([](int, TrackedSocket*, ListenerState* l) { new (&l->mutex) std::mutex; });
}

void claim_rdma_listener(int fd, TrackedSocket* socket) noexcept {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return;
  ListenerDirectory* directory = listener->directory.load();
  if (!listener->rdma_handed_on.load() && directory == nullptr) return;
  unsigned here = fork_generation();
  bool may_take_over = false;
  {
    std::lock_guard lock(listener->mutex);
    if (listener->rdma_listener != nullptr && listener->listener_generation == here) {
      // This process has its listener already; one on its own port may have to take the port over.
      may_take_over = directory != nullptr && listener->own_rdma_port != 0 && listener->directory_listener == nullptr;
      if (!may_take_over) return;
    } else {
      if (listener->claim_generation == here) return;  // tried already in this process
      listener->claim_generation = here;
      // An ancestor's listeners, dropped there or still its own: this memory is only a copy of their state.
      transport::keep_forever(listener->rdma_listener.release());
      transport::keep_forever(listener->directory_listener.release());
      listener->own_rdma_port = 0;
    }
  }
  if (may_take_over) {
    take_over_if_holder_died(fd, socket, directory);
    return;
  }
  pid_t self = getpid();
  if (directory != nullptr && !directory->claim_holder(self)) {
    listen_on_own_port(fd, socket, directory);
    return;
  }
  transport::Status s = take_listeners_port(fd, socket);
  if (s == transport::Status::kOk) {
    log_line(directory != nullptr ? "fd %d listener: RDMA listener made in this process of a pre-fork server"
                                  : "fd %d listener: RDMA listener made in this process, under its credentials now",
             fd);
    start_directory_service(fd, listener);
    return;
  }
  if (directory != nullptr) {
    directory->release_holder(self);
    listen_on_own_port(fd, socket, directory);
    return;
  }
  log_line("fd %d listener: no RDMA listener in this process (%s): its connections stay tcp", fd,
           s == transport::Status::kAddressInUse ? "another process of the server holds it" : transport::to_string(s));
}

}  // namespace tcp2rdma::preload
