// Memory the adapter may reach: whole pages, zeroed, so that a registration covers nothing else of
// the heap and no stale bytes of ours can ever be read from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "page_frames.h"

namespace tcp2rdma::transport {

// nullptr when there is no memory; freed with std::free.
inline uint8_t* allocate_pages(size_t bytes) {
  size_t whole = (bytes + kPageSize - 1) & ~(kPageSize - 1);
  void* p = std::aligned_alloc(kPageSize, whole);
  if (p != nullptr) std::memset(p, 0, whole);
  return static_cast<uint8_t*>(p);
}

}  // namespace tcp2rdma::transport
