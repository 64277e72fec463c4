// The layout of a TcpPrefix's mapping (tcp_prefix.h), shared by the processes that read it: this
// header, then the ring of bytes. Internal to tcp_prefix.cpp and tcp_prefix_relay.cpp.
#pragma once

#include <linux/futex.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "registry/tcp_prefix.h"

namespace tcp2rdma::preload {

// Every member but the atomics is touched with `mutex` held. `present` says without the lock whether
// anything is to be reported; `taken` is the futex word a relay that waits for room sleeps on.
struct TcpPrefix::Shared {
  pthread_mutex_t mutex;  // process-shared, robust: a reader that died holding it does not stop the others
  std::atomic<bool> present;
  std::atomic<uint32_t> taken;         // bumped by every take
  std::atomic<uint32_t> feeder_waits;  // the relay sleeps on `taken`: a take wakes it
  Then then;
  bool fed;      // a relay adds bytes still
  bool relay;    // made by a relay (start_relay)
  int32_t error;  // Then::kError's errno
  int32_t feeder;  // the process whose relay feeds the queue
  uint64_t capacity;
  uint64_t begin;  // bytes taken so far, in all
  uint64_t end;    // bytes added so far, in all
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(this + 1); }

  void update_present() { present.store(end != begin || fed || then != Then::kKernel, std::memory_order_release); }
  // Copies n bytes from the running position `at` (begin <= at, at + n <= end), around the ring's end.
  size_t copy_out(uint64_t at, uint8_t* to, size_t n) {
    if (n == 0) return 0;
    size_t offset = static_cast<size_t>(at % capacity);
    size_t first = std::min<size_t>(n, capacity - offset);
    std::memcpy(to, bytes() + offset, first);
    std::memcpy(to + first, bytes(), n - first);
    return n;
  }
  void copy_in(const uint8_t* from, size_t n) {
    if (n == 0) return;
    size_t offset = static_cast<size_t>(end % capacity);
    size_t first = std::min<size_t>(n, capacity - offset);
    std::memcpy(bytes() + offset, from, first);
    std::memcpy(bytes(), from + first, n - first);
    end += n;
  }
  void note_taken() {
    taken.fetch_add(1, std::memory_order_seq_cst);
    if (feeder_waits.load(std::memory_order_seq_cst) != 0) {
      syscall(SYS_futex, &taken, FUTEX_WAKE, 1, nullptr, nullptr, 0);
    }
  }
  // A mapping another process made: its counts fit the memfd's length.
  bool consistent(size_t length) const {
    return capacity <= length - sizeof(Shared) && begin <= end && end - begin <= capacity &&
           (capacity > 0 || end == 0) && static_cast<uint8_t>(then) <= static_cast<uint8_t>(Then::kError);
  }
  // With the lock held, before the counts are used: counts that no longer fit this process's mapping
  // of `length` (another process broke them) are read as a reset, never as bytes.
  void check(size_t length) {
    if (consistent(length)) return;
    begin = end = 0;
    fed = false;
    then = Then::kError;
    error = ECONNRESET;
    update_present();
  }
};

}  // namespace tcp2rdma::preload
