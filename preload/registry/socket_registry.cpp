#include "registry/socket_registry.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <new>

#include "registry/fd_table.h"
#include "util/saved_errno.h"

// Bookkeeping runs after a real call whose errno the application may still read: each function keeps
// errno (SavedErrno).
namespace tcp2rdma::preload {
namespace {

std::mutex g_numbers;  // hold_descriptor_numbers

void replace(int fd, TrackedSocket* socket) noexcept {
  TrackedSocket* previous = nullptr;
  if (!fd_table().exchange(fd, socket, &previous)) {
    if (socket != nullptr) socket->release();  // cannot track: the descriptor stays plain TCP
    return;
  }
  if (previous != nullptr) previous->release();
}

}  // namespace

bool is_tcp_candidate(int domain, int type, int protocol) noexcept {
  int base_type = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  return (domain == AF_INET || domain == AF_INET6) && base_type == SOCK_STREAM &&
         (protocol == 0 || protocol == IPPROTO_TCP);
}

void track_new_socket(int fd, int domain, SocketRole role) noexcept {
  SavedErrno keep;
  replace(fd, new (std::nothrow) TrackedSocket(domain, role));
}

void track_duplicate(int old_fd, int new_fd) noexcept {
  if (old_fd == new_fd) return;
  SavedErrno keep;
  replace(new_fd, fd_table().hold(old_fd));  // new_fd's reference
}

void track_close(int fd) noexcept {
  SavedErrno keep;
  replace(fd, nullptr);
}

TrackedSocket* untrack(int fd) noexcept {
  TrackedSocket* previous = nullptr;
  if (!fd_table().exchange(fd, nullptr, &previous)) return nullptr;
  return previous;
}

std::vector<TrackedSocket*> untrack_range(unsigned first, unsigned last) noexcept {
  SavedErrno keep;
  std::vector<TrackedSocket*> taken;
  unsigned end = static_cast<unsigned>(fd_table().high_water());
  for (unsigned fd = first; fd <= last && fd < end; ++fd) {
    if (TrackedSocket* socket = untrack(static_cast<int>(fd)); socket != nullptr) {
      try {
        taken.push_back(socket);
      } catch (const std::bad_alloc&) {
        socket->release();  // no memory to keep it until after the real call: let go now
      }
    }
  }
  return taken;
}

std::unique_lock<std::mutex> hold_descriptor_numbers() noexcept { return std::unique_lock(g_numbers); }

void numbers_hold_for_fork() noexcept { g_numbers.lock(); }

void numbers_release_after_fork() noexcept { g_numbers.unlock(); }

}  // namespace tcp2rdma::preload
