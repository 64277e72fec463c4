// posix_spawn, posix_spawnp, system() and popen() (interpose/process.cpp). The new program inherits
// every descriptor without FD_CLOEXEC, but a stream lives in this process's memory and cannot go
// along; given the idle TCP socket underneath, the program would read nothing and its writes would
// never arrive. So:
//  - a connection the spawn's file actions hand to the new program (posix_spawn_file_actions_adddup2,
//    inetd style) goes back to TCP first (rule on_fork: tcp), with its prefix and its return to RDMA
//    handed on as at exec (exec_guard.h, exec_returns.h: it returns in the new program once this
//    process let go of it); if it cannot go back (on_fork: parent, a peer that does not answer, a new
//    environment without the module), posix_spawn fails with ENOTSUP and says why in the log;
//  - every other descriptor of a connection on RDMA that lacks FD_CLOEXEC gets it for the duration of
//    the call (the new program does not have it at all: EBADF, loud), and gets it back afterwards;
//    this process's connection goes on on RDMA unaffected. (system() and popen() start helpers that
//    never use the server's connections: moving them all to TCP would cost every one of them.)
// Upgrades still on TCP are settled first (they stay TCP, and the new program may use them), as at fork.
#pragma once

#include <spawn.h>

#include <vector>

#include "process/exec_guard.h"

namespace tcp2rdma::preload {

class SpawnGuard {
 public:
  // actions and envp: posix_spawn's (null for system() and popen(), which hand nothing on).
  explicit SpawnGuard(const posix_spawn_file_actions_t* actions = nullptr, char* const* envp = nullptr);
  ~SpawnGuard();
  SpawnGuard(const SpawnGuard&) = delete;
  SpawnGuard& operator=(const SpawnGuard&) = delete;

  // What posix_spawn is to fail with instead of starting the program (0: start it).
  int error() const noexcept { return error_; }
  // The environment to start the program with.
  char* const* envp() noexcept { return returns_.envp(prefixes_.envp()); }

 private:
  void hand_on_dup2_targets(const posix_spawn_file_actions_t* actions);
  PrefixHandOn prefixes_;
  ReturnHandOn returns_;
  std::vector<int> marked_;  // the descriptors given FD_CLOEXEC here
  bool serves_listeners_ = false;  // a connection was handed on: answer for the new program's returns
  int error_ = 0;
};

// posix_spawn_file_actions_adddup2 succeeded (fd is to become newfd in the new program), and the
// actions object was made anew or destroyed: the wrappers keep this record, the only portable way to
// know which descriptors a spawn hands on.
void note_spawn_dup2(const posix_spawn_file_actions_t* actions, int fd, int newfd) noexcept;
void forget_spawn_actions(const posix_spawn_file_actions_t* actions) noexcept;
// Around the real fork, as for epoll (epoll_sets.h): the record of file actions is not half-changed
// in the child.
void spawn_hold_for_fork() noexcept;
void spawn_release_after_fork() noexcept;

}  // namespace tcp2rdma::preload
