// Which processes may hold a connection (docs/architecture.md, "Forks" and "Back to RDMA"). A fork
// or a spawn since a socket was made here leaves it *shared*: another process may hold it too (in a
// child, every inherited socket is), and a switch to RDMA would split its bytes between the two. A
// forked child can learn that it holds a connection alone (its parent let go and lent it to no other
// child alive): then it is this process's again until the next fork or spawn, and may go back to
// RDMA here. A server connection's return in such a child needs the listener that accepted it
// (upgrade/return_to_rdma.h), which the child may have closed: the child keeps it from the fork.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

namespace tcp2rdma::preload {

class SocketHold;
class TrackedSocket;

// Before a fork or a spawn: every connection of this process is from now on shared with another
// process, in the child as in the parent.
void note_forking() noexcept;
// The forks and spawns counted so far (in a child, its ancestors' too).
uint64_t forks_so_far() noexcept;

// A socket's ties across forks (TrackedSocket::forks).
class ForkShare {
 public:
  ForkShare() noexcept;
  ~ForkShare();  // lets go of the kept listener
  ForkShare(const ForkShare&) = delete;
  ForkShare& operator=(const ForkShare&) = delete;

  bool shared() const noexcept;
  // The connection was passed to another process (SCM_RIGHTS: process/descriptor_passing.h): shared
  // for good, whatever this process learns of its forks.
  void note_passed() noexcept { passed_.store(true, std::memory_order_relaxed); }
  bool passed() const noexcept { return passed_.load(std::memory_order_relaxed); }
  // No other process holds the connection any more (process/fork_service.h): unshared until the
  // process forks or spawns again.
  void note_alone() noexcept;
  // A connection this program got from the program that exec'd it (process/exec_returns.h), which
  // the process `creator` made. Unless that program held it `alone`, the exec'ing process's parent or
  // its children may hold it too: shared until note_alone().
  void note_inherited(pid_t creator, bool alone) noexcept {
    creator_.store(creator, std::memory_order_relaxed);
    inherited_.store(!alone, std::memory_order_relaxed);
  }
  // The process that made the socket: 0 for this one; in a forked child, the ancestor that did
  // (note_sockets_made_before_fork). Only it and the processes between it and this one may hold it
  // from a fork (registry/socket_holders.h).
  pid_t creator() const noexcept { return creator_.load(std::memory_order_relaxed); }

  // A child that claimed the connection while its parent still held it (process/fork_service.h): it
  // may learn by asking later that the parent let go since, so long as it has not forked itself.
  void note_claimed_while_held() noexcept;
  bool awaits_parents_word() const noexcept;

  // The listener that accepted this server connection, noted at accept() without a reference: only
  // compared (accepted_from: the same socket, not a later one at its address), never followed.
  void note_accepted_from(const TrackedSocket* listener) noexcept;
  bool accepted_from(const TrackedSocket* candidate) const noexcept;
  // In a forked child: that listener (held by the caller), kept with a reference of its own from the
  // fork or the take-up of a deferred upgrade; empty when none was kept.
  void keep_return_listener(TrackedSocket* listener) noexcept;
  SocketHold return_listener() const noexcept;

 private:
  const uint64_t forks_at_birth_;
  const uint64_t birth_;  // this socket's number among those made in this process and its ancestors
  std::atomic<uint64_t> alone_at_forks_{UINT64_MAX};  // the forks counted when note_alone() was called
  std::atomic<uint64_t> claimed_at_forks_{UINT64_MAX};  // ... and when note_claimed_while_held() was
  const TrackedSocket* accepted_from_ = nullptr;      // set once, at accept(), before it is shared
  uint64_t accepted_from_birth_ = 0;
  std::atomic<TrackedSocket*> return_listener_{nullptr};  // held
  std::atomic<bool> passed_{false};
  std::atomic<bool> inherited_{false};
  std::atomic<pid_t> creator_{0};
  friend void note_sockets_made_before_fork(pid_t parent) noexcept;
};

// In a forked child, right after the fork: every socket without a creator yet was made by `parent`.
void note_sockets_made_before_fork(pid_t parent) noexcept;

}  // namespace tcp2rdma::preload
