#include "process/spawn_guard.h"

#include <fcntl.h>

#include <cerrno>
#include <mutex>

#include "back_to_tcp/move_back.h"
#include "libc/real_calls.h"
#include "listener/prefork_listeners.h"
#include "process/deferred_upgrade.h"
#include "process/fork_service.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

struct Dup2 {
  const posix_spawn_file_actions_t* actions;
  int fd;
  int newfd;
};

std::mutex g_mutex;
std::vector<Dup2> g_dup2s;

std::vector<Dup2> dup2s_of(const posix_spawn_file_actions_t* actions) {
  std::vector<Dup2> mine;
  std::lock_guard lock(g_mutex);
  for (const Dup2& d : g_dup2s) {
    if (d.actions == actions) mine.push_back(d);
  }
  return mine;
}

}  // namespace

void note_spawn_dup2(const posix_spawn_file_actions_t* actions, int fd, int newfd) noexcept {
  if (fd_table().find(fd) == nullptr) return;  // only TCP sockets matter
  std::lock_guard lock(g_mutex);
  g_dup2s.push_back({actions, fd, newfd});
}

void spawn_hold_for_fork() noexcept { g_mutex.lock(); }
void spawn_release_after_fork() noexcept { g_mutex.unlock(); }

void forget_spawn_actions(const posix_spawn_file_actions_t* actions) noexcept {
  std::lock_guard lock(g_mutex);
  std::erase_if(g_dup2s, [&](const Dup2& d) { return d.actions == actions; });
}

SpawnGuard::SpawnGuard(const posix_spawn_file_actions_t* actions, char* const* envp)
    : prefixes_(envp), returns_(prefixes_.module_follows()) {
  SavedErrno keep_errno;
  note_forking();  // the new program may hold any of this process's connections from now on
  settle_all_sessions();
  // What our parent lent us (on RDMA, or with its upgrade deferred) the new program may hold: ours on
  // TCP first.
  claim_all_from_parent();
  claim_inherited_deferred_upgrades(/*survives=*/nullptr, /*lock_held=*/false);
  if (actions != nullptr) hand_on_dup2_targets(actions);
  if (error_ != 0) return;
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    if (socket->stream() == nullptr) return;
    int flags = real().fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) != 0) return;
    if (real().fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0) marked_.push_back(fd);
  });
}

void SpawnGuard::hand_on_dup2_targets(const posix_spawn_file_actions_t* actions) {
  std::vector<Dup2> handed = dup2s_of(actions);
  // A server connection's return in the new program needs its listener's directory (exec_returns.h).
  if (!handed.empty()) {
    prepare_listeners_for_spawn();
    serves_listeners_ = true;
  }
  for (const Dup2& d : handed) {
    SocketHold socket = SocketHold::of(d.fd);
    if (!socket) continue;
    if (transport::RdmaStream* stream = socket->stream()) {
      if (!socket->follows_fork.load(std::memory_order_relaxed) || !move_back(socket.get(), stream, d.fd, "spawn")) {
        log_line("fd %d: posix_spawn fails: its connection is on RDMA and cannot go back to TCP for the new program",
                 d.fd);
        error_ = ENOTSUP;
        return;
      }
    }
    if (socket->prefix.present() && !prefixes_.add(socket.get(), d.newfd)) {
      log_line("fd %d: posix_spawn fails: %zu bytes of the peer's cannot go with it to the new program", d.fd,
               socket->prefix.size());
      error_ = ENOTSUP;
      return;
    }
    // Its return to RDMA goes along: the new program's, once no other process holds the connection.
    (void)returns_.add(socket.get(), d.newfd);
  }
}

SpawnGuard::~SpawnGuard() {
  SavedErrno keep_errno;
  if (serves_listeners_) serve_listeners_after_spawn();
  for (int fd : marked_) {
    int flags = real().fcntl(fd, F_GETFD);
    if (flags >= 0) real().fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
  }
}

}  // namespace tcp2rdma::preload
