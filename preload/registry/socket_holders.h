// Whether another process holds a descriptor of a socket, in the kernel's words (docs/architecture.md,
// "Back to RDMA"). A connection shared at a fork, a spawn or a claim goes back to RDMA in the process
// that keeps it once no other process holds it: the BGSAVE child exited, the helper exec'd without
// it, the parent closed its copy. What this process knows of its forks cannot tell (a child's exit
// or exec says nothing about descriptors it still held or passed on), so the answer comes from
// /proc: every process's descriptors, looked at for the socket's inode.
#pragma once

#include <sys/types.h>

#include <vector>

namespace tcp2rdma::preload {

enum class Holders : unsigned char {
  kThisProcessOnly,  // no other process holds the socket
  kOthers,           // another process holds a descriptor of it
  kUnknown,          // a process that may (a descendant or an ancestor of ours) cannot be looked at
};

// fd's socket, made by the process `creator` (ForkShare::creator: 0 for this one). One look at /proc
// serves every call within a second (a scan lists every process's descriptors: a few system calls
// each); made on the caller's thread.
Holders socket_holders(int fd, pid_t creator = 0) noexcept;
// In a forked child, right after the fork: the scan's lock is made anew (a thread of the parent may
// have held it at the fork, and that thread does not exist here).
void socket_holders_after_fork() noexcept;

// What one look at /proc found: the socket inodes that processes other than `self` hold (sorted),
// whether a descendant of self's could not be looked at, and which of self's ancestors could not
// (self's ancestors below init, nearest first, read only when some process could not be looked at).
struct HeldSockets {
  std::vector<ino_t> inodes;
  bool unknown_descendant = false;
  std::vector<pid_t> ancestors;
  std::vector<pid_t> hidden_ancestors;
  // Who may hold `inode`, a socket that `creator` made (0 or self: self made it). An ancestor holds
  // only what it made or inherited itself: one above the creator cannot hold the socket (sudo,
  // runuser or a root shell above an unprivileged server that accepted it). A creator that is not
  // among self's ancestors any more (a parent that exited) leaves every hidden ancestor counted.
  Holders of(ino_t inode, pid_t creator = 0, pid_t self = 0) const noexcept;
};
// The part that reads /proc, for the tests: `proc` is a directory laid out as /proc (PID/fd/N links,
// PID/stat). False when it cannot be read at all.
bool scan_held_sockets(const char* proc, pid_t self, HeldSockets* out) noexcept;

}  // namespace tcp2rdma::preload
