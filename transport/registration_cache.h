// Memory registrations of application buffers for zero-copy sends, kept for reuse.
//
// The danger of such a cache: a registration pins the pages that were mapped when it was made. If the
// application frees or unmaps the buffer and new memory is later mapped at the same address, a cache
// keyed by address alone would send the old pages. Hooks on munmap cannot close that hole (glibc's
// free() unmaps through an internal call no preload sees), so every reuse is proven instead: the cache
// records the physical frames a registration pinned and, on each hit, reads the frames now mapped there
// (page_frames.h); any difference drops the old registration and makes a new one. Where frames cannot
// be read (no CAP_SYS_ADMIN) nothing is kept: each buffer is registered for one send and released.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "status.h"

namespace tcp2rdma::transport {

class RegistrationCache {
 public:
  struct Counters {
    uint64_t registrations = 0;  // ibv_reg_mr calls made for application buffers
    uint64_t hits = 0;           // reuses proven by their frames
    uint64_t stale = 0;          // entries whose frames changed: dropped, never used
    uint64_t evictions = 0;
    uint64_t unverifiable = 0;   // registrations not kept because frames could not be read
  };

  RegistrationCache(ibv_pd* pd, size_t max_entries) : pd_(pd), max_entries_(max_entries) {}
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A registration covering [addr, addr + len), valid until release(). kMemoryLock or kResources when
  // the buffer cannot be registered (the caller copies instead).
  Status acquire(const void* addr, size_t len, ibv_mr** mr);
  // The send from `mr` has completed. Registrations that were not kept are deregistered here.
  void release(ibv_mr* mr);

  const Counters& counters() const { return counters_; }

 private:
  struct Entry {
    uintptr_t first_page;
    size_t pages;
    ibv_mr* mr;
    std::vector<uint64_t> frames;  // what the registration pinned
    uint64_t last_use;
  };
  Entry* find(uintptr_t first_page, size_t pages);
  bool still_mapped(const Entry& entry, uintptr_t first_page, size_t pages);
  void drop(size_t index);

  ibv_pd* pd_;
  size_t max_entries_;
  std::vector<Entry> entries_;
  ibv_mr* uncached_ = nullptr;  // the one registration in use that is not kept
  std::vector<uint64_t> scratch_;
  uint64_t clock_ = 0;
  Counters counters_;
};

}  // namespace tcp2rdma::transport
