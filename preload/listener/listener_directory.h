// The directory of a pre-fork server's listener (docs/architecture.md, "Pre-fork servers"). Only one
// process can hold the rdma_cm listener on a port, and a connection request cannot move between
// processes; so the process holding the well-known port answers, for every other process of the
// server, with a redirect to a port of that process's own. This table, in memory every process of
// the family shares (MAP_SHARED, made before the first fork), says who holds the port and where each
// accepted connection's request is awaited.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "wire.h"

namespace tcp2rdma::preload {

class ListenerDirectory {
 public:
  // Connections accepted by workers whose RDMA requests are awaited at the same moment.
  static constexpr size_t kEntries = 256;

  // A new, empty directory in the shared mapping of a memfd, or null when it cannot be mapped.
  // *memfd: the memfd (the module's own descriptor, close-on-exec), kept by the caller so that a
  // new program the process execs can map the same directory (process/exec_returns.h); -1 when
  // only anonymous shared memory could be had (the family's forks share it all the same).
  static ListenerDirectory* create(int* memfd) noexcept;
  // The directory in `memfd`, made by create() in another process of the family, mapped here; null
  // when it is not one (a wrong size).
  static ListenerDirectory* map(int memfd) noexcept;
  // Unmaps this process's view; the other processes keep theirs.
  static void unmap(ListenerDirectory* directory) noexcept;

  // Whether `self` should take the well-known port: true, recording it as the holder, unless a live
  // process other than `self` holds it.
  bool claim_holder(pid_t self) noexcept;
  // `self` lets go of the port (dropped its listener, or could not get it after claiming).
  void release_holder(pid_t self) noexcept;
  pid_t holder() noexcept;

  // A process that accepted `tuple` awaits its RDMA request on `port`. False when the table is full
  // of live processes' entries.
  bool publish(const transport::TcpTuple& tuple, uint16_t port, pid_t self) noexcept;
  void withdraw(const transport::TcpTuple& tuple, pid_t self) noexcept;
  // The port published for `tuple`, or 0 when none is.
  uint16_t port_for(const transport::TcpTuple& tuple) noexcept;

 private:
  struct Entry {
    pid_t pid;  // 0: free
    uint16_t port;
    transport::TcpTuple tuple;
  };
  ListenerDirectory() = delete;

  pthread_mutex_t mutex_;  // process-shared and robust: a worker may die holding it
  pid_t holder_;
  Entry entries_[kEntries];
};

// Whether process `pid` still runs (a zombie, exited but not yet reaped, does not).
bool process_alive(pid_t pid) noexcept;

}  // namespace tcp2rdma::preload
