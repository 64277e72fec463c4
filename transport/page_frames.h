// Which physical pages back a range of our address space, from /proc/self/pagemap. The registration
// cache compares them to prove that a registered buffer is still the memory the application now has at
// that address (docs/protocol.md, "Zero-copy"). The kernel shows frame numbers only to a process with
// CAP_SYS_ADMIN; elsewhere they read as zero and nothing can be proven.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tcp2rdma::transport {

inline constexpr size_t kPageSize = 4096;

// Fills `frames` with one entry per page of [first_page, first_page + pages*kPageSize): the frame
// number, or 0 for a page that is not present. False when pagemap cannot be read or shows no frame
// numbers (no CAP_SYS_ADMIN).
bool read_page_frames(uintptr_t first_page, size_t pages, std::vector<uint64_t>* frames);

}  // namespace tcp2rdma::transport
