// Memory the adapter may reach: whole pages, zeroed, so that a registration covers nothing else of
// the heap and no stale bytes of ours can ever be read from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <malloc.h>
#include <sys/mman.h>

#include "page_frames.h"

namespace tcp2rdma::transport {

// nullptr when there is no memory; freed with free_pages.
//
// Not copied into a forked child (MADV_DONTFORK): a child never uses its parent's RDMA resources, and
// the kernel copies every page of a private mapping that is pinned (registered memory is) at each
// fork, which made every fork of a process with connections on RDMA several times as long (redis's
// BGSAVE: 22 ms against 5 ms with its connections on kernel TCP, 50 connections).
inline uint8_t* allocate_pages(size_t bytes) {
  size_t whole = (bytes + kPageSize - 1) & ~(kPageSize - 1);
  void* p = std::aligned_alloc(kPageSize, whole);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, whole);
#ifndef __SANITIZE_ADDRESS__
  // Not under AddressSanitizer: its LeakSanitizer reads every heap block at a forked child's exit,
  // and a page left out of the child is a fault there.
  (void)madvise(p, whole, MADV_DONTFORK);
#endif
  return static_cast<uint8_t*>(p);
}

// Gives allocate_pages' memory back to the heap, forked like any of it again first (a later
// allocation of the application's there must reach its children). Null is nothing.
inline void free_pages(void* p) {
  if (p == nullptr) return;
  // The whole pages of the block, at least the ones allocate_pages marked.
  size_t usable = malloc_usable_size(p) & ~(kPageSize - 1);
  (void)madvise(p, usable, MADV_DOFORK);
  std::free(p);
}

}  // namespace tcp2rdma::transport
